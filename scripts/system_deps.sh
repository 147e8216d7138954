#!/usr/bin/env bash
# System packages the test suite and `make chaos` need, installed with apt-get when this runs as
# root on Debian/Ubuntu (CI, fresh VMs). Otherwise it lists what is missing and leaves the
# machine alone: the tests that need a missing tool fail with a message naming its package.
#   java      (default-jre-headless): the PySpark pipeline
#   javac     (default-jdk-headless): the RocketMQ compatibility tests compile their Java client
#   chromium  (chromium):             the HTML failover report test
#   nft, ip   (nftables, iproute2):   make chaos (network namespaces)
#   pg_ctl    (postgresql):           the SQL controller backend's tests on PostgreSQL
#   mariadbd  (mariadb-server):       ... and on MariaDB
#   etcd      (etcd-server):          the etcd controller backend's tests (and bench-controller)
#   etcdctl   (etcd-client):          sets up etcd RBAC in the store-security test
#   zookeeper (zookeeper):            the ZooKeeper controller backend's tests
#   fuse3, libfuse3-dev, pkg-config:  tests/grayfail/slowfs.c (a disk that is slow or hangs on command)
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
need=()
command -v java >/dev/null     || need+=(default-jre-headless)
command -v javac >/dev/null    || need+=(default-jdk-headless)
command -v make >/dev/null     || need+=(make)
command -v chromium >/dev/null || need+=(chromium)
command -v nft >/dev/null      || need+=(nftables)
command -v ip >/dev/null       || need+=(iproute2)
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v pg_ctl >/dev/null || ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || need+=(postgresql)
command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
command -v etcd >/dev/null || need+=(etcd-server)
command -v etcdctl >/dev/null || need+=(etcd-client)
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
command -v fusermount3 >/dev/null || need+=(fuse3)
[ -f /usr/include/fuse3/fuse.h ] || need+=(libfuse3-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "system_deps: installing ${need[*]}"
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${need[@]}"
else
  echo "system_deps: missing ${need[*]} (install them as root: apt-get install ${need[*]})" >&2
fi
