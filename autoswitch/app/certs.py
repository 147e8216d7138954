"""`autoswitch certs init`: a development CA and one certificate per process, so the playground and
the tests run real TLS. Not a production PKI: use your own CA there (docs/security.md).

Every certificate's subject CN is the identity the process acts as (``controller/n1``,
``broker/g1/2``, ``admin``); it carries the given hosts as subject alternative names (127.0.0.1
and localhost by default) so clients can verify the server they dialled, and the URI
``urn:autoswitch:cluster:<cluster>`` that binds it to one controller cluster (controllers accept Raft
peers of their own cluster only). The cluster name is ``--cluster``, else the one this directory
already holds (``cluster``, beside ``ca.pem``), else a new random one: two clusters made with the
same CA never share a name by accident. Keys are EC P-256, written 0600; certificates are valid for
``days`` days.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import json
import os
import re
import secrets
from collections.abc import Iterable
from pathlib import Path

from autoswitch.base.errors import ConfigError
from autoswitch.base.output import emit, fail, fail_code, render
from autoswitch.base.tls import CLUSTER_URI_PREFIX

DEFAULT_HOSTS = ("127.0.0.1", "localhost")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,126}$")
CLUSTER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_NAMES = 256
CLUSTER_FILE = "cluster"


def cluster_name(directory: Path, wanted: str | None) -> str:
    """The cluster this directory's certificates are bound to: ``wanted``, else the recorded one,
    else a new random name (recorded). A ``wanted`` that differs from the recorded one is refused:
    certificates of one CA directory belong to one cluster."""
    path = directory / CLUSTER_FILE
    have = path.read_text().strip() if path.exists() else None
    if wanted is not None and not CLUSTER_RE.match(wanted):
        raise ConfigError(f"--cluster must match {CLUSTER_RE.pattern}", key="cluster")
    if have is not None and not CLUSTER_RE.match(have):
        raise ConfigError(f"{path} does not hold a cluster name", path=str(path))
    if have is not None and wanted is not None and have != wanted:
        raise ConfigError(f"{directory} issues certificates for cluster {have!r}, not {wanted!r}: "
                          "use another directory (and CA) for another cluster", key="cluster")
    name = have or wanted or f"c-{secrets.token_hex(8)}"
    if have is None:
        _write(path, (name + "\n").encode(), private=False)
    return name


def _file_name(identity: str) -> str:
    return identity.replace("/", "_")


def _write(path: Path, data: bytes, private: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def init_dev_ca(directory: Path, identities: Iterable[str], hosts: Iterable[str] = DEFAULT_HOSTS,
                days: int = 30, cluster: str | None = None) -> dict[str, dict[str, str]]:
    """Create ``ca.pem``/``ca.key`` (kept if present) and ``<identity>.pem``/``.key`` for each
    identity in ``directory``, bound to ``cluster_name(directory, cluster)``; returns identity ->
    {"cert", "key", "ca", "cluster"}."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ids = list(dict.fromkeys(identities))
    if not ids or len(ids) > MAX_NAMES:
        raise ConfigError(f"give 1..{MAX_NAMES} identities")
    bad = [i for i in ids if not NAME_RE.match(i)]
    if bad:
        raise ConfigError(f"identities must match {NAME_RE.pattern}: {bad[:5]}")
    if not 1 <= days <= 3650:
        raise ConfigError("days must be 1..3650")
    directory.mkdir(parents=True, exist_ok=True)
    bound_to = cluster_name(directory, cluster)
    now = dt.datetime.now(dt.UTC)
    pem = serialization.Encoding.PEM
    nokey = serialization.NoEncryption()

    ca_key_path, ca_path = directory / "ca.key", directory / "ca.pem"
    if ca_key_path.exists() and ca_path.exists():
        loaded = serialization.load_pem_private_key(ca_key_path.read_bytes(), None)
        if not isinstance(loaded, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey):
            raise ConfigError(f"{ca_key_path} holds a {type(loaded).__name__}, which cannot sign certificates "
                              "(an EC, RSA or Ed25519 key can)", path=str(ca_key_path))
        ca_key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey = loaded
        ca_cert = x509.load_pem_x509_certificate(ca_path.read_bytes())
    else:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "autoswitch development CA")])
        ca_cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                   .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
                   .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                   .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                content_commitment=False, key_encipherment=False,
                                                data_encipherment=False, key_agreement=False,
                                                encipher_only=False, decipher_only=False), critical=True)
                   .sign(ca_key, hashes.SHA256()))
        _write(ca_key_path, ca_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, nokey), private=True)
        _write(ca_path, ca_cert.public_bytes(pem), private=False)

    sans: list[x509.GeneralName] = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    sans.append(x509.UniformResourceIdentifier(f"{CLUSTER_URI_PREFIX}{bound_to}"))
    out: dict[str, dict[str, str]] = {}
    for ident in ids:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ident)]))
                .issuer_name(ca_cert.subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.SubjectAlternativeName(sans), critical=False)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        base = _file_name(ident)
        key_path, cert_path = directory / f"{base}.key", directory / f"{base}.pem"
        _write(key_path, key.private_bytes(pem, serialization.PrivateFormat.PKCS8, nokey), private=True)
        _write(cert_path, cert.public_bytes(pem), private=False)
        out[ident] = {"cert": str(cert_path), "key": str(key_path), "ca": str(ca_path), "cluster": bound_to}
    return out


def issue_token(tokens_file: Path, name: str, roles: Iterable[str], group: str | None = None,
                broker_id: int | None = None) -> str:
    """Add (or replace) token ``name`` in ``tokens_file`` and return the token: the file keeps only
    its SHA-256 digest, so this is the one time it can be read. Servers pick the change up
    without a restart."""
    import secrets

    from autoswitch.base.auth import parse_roles, parse_tokens_file, token_digest

    if not TOKEN_NAME_RE.match(name):
        raise ConfigError(f"token names must match {TOKEN_NAME_RE.pattern}", name=name)
    role_set = sorted(r.value for r in parse_roles(list(roles), f"token {name!r}"))
    token = "ast_" + secrets.token_urlsafe(32)
    entries = _token_tables(tokens_file)
    entry: dict[str, object] = {"roles": role_set, "sha256": token_digest(token)}
    if group is not None or broker_id is not None:
        entry.update(group=group, broker_id=broker_id)
    entries[name] = entry
    _write_tokens(tokens_file, entries)
    parse_tokens_file(str(tokens_file))        # what we wrote must be what servers accept
    return token


def revoke_token(tokens_file: Path, name: str) -> bool:
    entries = _token_tables(tokens_file)
    if entries.pop(name, None) is None:
        return False
    _write_tokens(tokens_file, entries)
    return True


TOKEN_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def _token_tables(tokens_file: Path) -> dict[str, dict]:
    import tomllib

    if not tokens_file.exists():
        return {}
    from autoswitch.base.auth import parse_tokens_file

    parse_tokens_file(str(tokens_file))        # refuse to extend a file servers would refuse
    return dict(tomllib.loads(tokens_file.read_text("utf-8")).get("tokens", {}))


def _write_tokens(tokens_file: Path, entries: dict[str, dict]) -> None:
    from autoswitch.base.fsutil import write_atomic

    lines = ["# autoswitch bearer tokens: SHA-256 digests only (autoswitch certs token)", ""]
    for name, e in sorted(entries.items()):
        lines.append(f"[tokens.{json.dumps(name)}]")
        lines.append("roles = [" + ", ".join(json.dumps(r) for r in e["roles"]) + "]")
        lines.append(f"sha256 = {json.dumps(e['sha256'])}")
        if e.get("group") is not None:
            lines.append(f"group = {json.dumps(e['group'])}")
            lines.append(f"broker_id = {int(e['broker_id'])}")
        lines.append("")
    tokens_file.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(tokens_file, "\n".join(lines).encode())


def register(sub, admin_sub) -> None:
    certs = sub.add_parser("certs", help="development TLS certificates")
    certs_sub = certs.add_subparsers(dest="certs_command", required=True, metavar="CERTS_COMMAND")
    p = certs_sub.add_parser("init", help="create a development CA and one certificate per identity")
    p.add_argument("directory", type=Path)
    p.add_argument("identities", nargs="+", help="e.g. controller/n1 broker/g1/1 admin")
    p.add_argument("--host", action="append", default=None,
                   help="subject alternative name (IP or DNS); repeat; default 127.0.0.1 and localhost")
    p.add_argument("--days", type=int, default=30)
    p.add_argument("--cluster", default=None,
                   help="the controller cluster the certificates are bound to (default: the directory's, "
                        "else a new random name)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_init)
    p = certs_sub.add_parser("token", help="issue a bearer token into a tokens file (prints it once)")
    p.add_argument("tokens_file", type=Path)
    p.add_argument("name")
    p.add_argument("--roles", required=True, help="comma-separated: peer, broker, producer, reader, admin")
    p.add_argument("--group", default=None, help="broker scope: its group (with --broker-id)")
    p.add_argument("--broker-id", type=int, default=None)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_token)
    p = certs_sub.add_parser("revoke", help="remove a token from a tokens file (servers stop accepting it)")
    p.add_argument("tokens_file", type=Path)
    p.add_argument("name")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_revoke)


def _cmd_init(args: argparse.Namespace) -> int:
    try:
        out = init_dev_ca(args.directory, args.identities, args.host or DEFAULT_HOSTS, args.days, args.cluster)
    except ConfigError as e:
        return fail(args, e, rc=2)
    result = {"directory": str(args.directory), "identities": out}
    if args.json:
        emit(args, result)
        return 0
    # for people: one line, then one row per identity (the paths in the folder, not a column each)
    any_id = next(iter(out.values()), {})
    render({"summary": f"{len(out)} certificates in {args.directory} (CA {Path(any_id.get('ca', '-')).name}, "
                       f"cluster {any_id.get('cluster', '-')})",
            "identities": [{"identity": name, "cert": Path(v["cert"]).name, "key": Path(v["key"]).name}
                           for name, v in out.items()]})
    return 0


def _cmd_token(args: argparse.Namespace) -> int:
    try:
        token = issue_token(args.tokens_file, args.name, args.roles.split(","), args.group, args.broker_id)
    except ConfigError as e:
        return fail(args, e, rc=2)
    emit(args, {"name": args.name, "token": token, "tokens_file": str(args.tokens_file)})
    return 0


def _cmd_revoke(args: argparse.Namespace) -> int:
    try:
        found = revoke_token(args.tokens_file, args.name)
    except ConfigError as e:
        return fail(args, e, rc=2)
    if not found:
        return fail_code(args, "NOT_FOUND", f"no token named {args.name!r} in {args.tokens_file}")
    emit(args, {"name": args.name, "revoked": found})
    return 0
