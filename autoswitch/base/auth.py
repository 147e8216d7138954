"""Who is calling, and may they: identities, roles and the one gRPC interceptor per server that
checks every call before any handler runs.

Identity comes from the caller's verified client certificate (its subject CN, mapped by the
conventions below or by the ``auth_identities`` table) or from a bearer token (``authorization:
Bearer <token>`` metadata, looked up in a tokens file that stores only SHA-256 digests). A token
wins over the certificate it travels with, so an operator can use a CLI with a CA-only TLS setup.

Roles (docs/security.md has the full method table):

    peer      a controller member: Raft messages, liveness queries
    broker    register, heartbeat, alter SyncStateSet, routes, HA replication: for its own group
              and brokerId when the identity names them (``broker/<group>/<brokerId>``)
    producer  produce
    reader    metadata, SyncStateSet, events, status, consume
    admin     elect, clean, update config, switch role (static mode); admins are readers too

Certificate CN conventions (what ``autoswitch certs init`` issues): ``controller/<id>`` -> peer +
reader; ``broker/<group>/<brokerId>`` -> broker for that group and id; ``admin`` or ``admin/<x>``
-> admin, reader, producer; ``producer/<x>`` -> producer; ``reader/<x>`` and ``namesrv/<x>`` -> reader. Anything else
has no role unless ``auth_identities`` maps it (a mapped ``broker`` role is unscoped: a process
hosting many brokers).

A denied call ends with PERMISSION_DENIED naming the role it lacked (also in the trailing
metadata ``x-autoswitch-missing-role``); denials are counted and logged at most once per
(caller, method) per 10 s.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import ipaddress
import os
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from autoswitch.base.errors import ConfigError
from autoswitch.base.limits import MAX_BROKER_ID, MAX_NAME_LEN
from autoswitch.base.log import RateLimitedLog, get_logger

MAX_TOKENS = 10_000
MAX_TOKEN_BYTES = 4096
MAX_TOKENS_FILE_BYTES = 4 << 20
MISSING_ROLE_KEY = "x-autoswitch-missing-role"


class Role(StrEnum):
    PEER = "peer"
    BROKER = "broker"
    PRODUCER = "producer"
    READER = "reader"
    ADMIN = "admin"


ROLE_NAMES = frozenset(r.value for r in Role)


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller. ``group``/``broker_id`` scope the broker role (None = any)."""

    name: str
    roles: frozenset[Role]
    group: str | None = None
    broker_id: int | None = None
    via: str = "cert"           # cert | token | none

    @property
    def scoped(self) -> bool:
        return self.group is not None


ANONYMOUS = Principal("anonymous", frozenset(), via="none")


def parse_roles(raw: Iterable[str] | str, where: str) -> frozenset[Role]:
    items = [r.strip() for r in raw.split(",")] if isinstance(raw, str) else [str(r).strip() for r in raw]
    bad = sorted(r for r in items if r not in ROLE_NAMES)
    if bad or not items:
        raise ConfigError(f"{where}: roles must be some of {sorted(ROLE_NAMES)}, got {bad or 'none'}")
    return frozenset(Role(r) for r in items)


def parse_broker_identity(name: str) -> tuple[str, int] | None:
    """(group, brokerId) of a ``broker/<group>/<brokerId>`` identity, else None."""
    parts = name.split("/")
    if len(parts) != 3 or parts[0] != "broker" or not parts[1] or len(parts[1]) > MAX_NAME_LEN:
        return None
    if not parts[2].isdigit() or len(parts[2]) > 19:
        return None
    bid = int(parts[2])
    return (parts[1], bid) if 1 <= bid <= MAX_BROKER_ID else None


# Which certificate CNs, by the conventions above, belong to another kind of process than the one
# starting: a server started with an operator's or another server's certificate would be refused
# by every peer (or act with rights it must not have), so it refuses to start instead.
_FOREIGN_HEADS = {
    "broker": ("admin", "producer", "reader", "controller", "namesrv"),
    "controller": ("admin", "producer", "reader", "broker", "namesrv"),
    "namesrv": ("admin", "producer", "reader", "broker"),
}


_OWN_CN = {"broker": "broker/<group>/<brokerId>", "controller": "controller/<node id>", "namesrv": "namesrv/<n>"}


def server_identity_problem(kind: str, cn: str | None, node_id: str = "") -> str | None:
    """Why a ``kind`` server ("broker", "controller", "namesrv") must not run with a certificate
    naming ``cn``; None when it may. A CN outside the conventions may be mapped by
    ``auth_identities`` and is let through; a controller's ``controller/<id>`` must name its node."""
    if not cn:
        return None
    head = cn.split("/", 1)[0]
    if head in _FOREIGN_HEADS[kind]:
        return (f"the certificate names {cn[:128]!r}, which is a {head} identity, not a {kind}'s: a client profile "
                f"or another process's certificate? (a {kind} runs with its own, {_OWN_CN[kind]})")
    if kind == "controller" and head == "controller" and node_id and cn != f"controller/{node_id}":
        return f"the certificate names {cn[:128]!r}, this node is {node_id!r} (controller/{node_id})"
    return None


class IdentityMap:
    """Certificate CN -> Principal (the conventions above, then the explicit table)."""

    def __init__(self, mapping: Mapping[str, Iterable[str] | str] | None = None) -> None:
        self.mapping = {cn: parse_roles(roles, f"auth_identities[{cn!r}]") for cn, roles in (mapping or {}).items()}

    def principal(self, cn: str) -> Principal:
        roles = self.mapping.get(cn)
        if roles is not None:
            return Principal(cn, roles)
        head = cn.split("/", 1)[0]
        if head == "controller" and "/" in cn:
            return Principal(cn, frozenset({Role.PEER, Role.READER}))
        if head == "broker":
            scope = parse_broker_identity(cn)
            if scope is not None:
                return Principal(cn, frozenset({Role.BROKER}), group=scope[0], broker_id=scope[1])
            return Principal(cn, frozenset())
        if head == "admin":
            return Principal(cn, frozenset({Role.ADMIN, Role.READER, Role.PRODUCER}))
        if head == "namesrv" and "/" in cn:       # a standalone name server reads the controllers
            return Principal(cn, frozenset({Role.READER}))
        if head == "producer" and "/" in cn:
            return Principal(cn, frozenset({Role.PRODUCER}))
        if head == "reader" and "/" in cn:
            return Principal(cn, frozenset({Role.READER}))
        return Principal(cn, frozenset())


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class _TokenEntry:
    digest: bytes
    principal: Principal


class TokenStore:
    """The tokens file (TOML), re-read whenever it changes, so adding or revoking a token needs no
    restart::

        [tokens.alice]
        roles = ["reader"]
        sha256 = "<hex digest of the token>"       # `autoswitch certs token` prints both

        [tokens.g1-2]
        roles = ["broker"]
        group = "g1"                               # optional broker scope
        broker_id = 2

    Tokens are random 256-bit strings, so one SHA-256 is the right digest (no password
    stretching needed); every stored digest is compared in constant time. A file that becomes
    unreadable or invalid keeps the last good set and logs why."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.log = get_logger("auth.tokens", path=path)
        self._stamp: tuple[int, int, int] | None = None
        self._entries: tuple[_TokenEntry, ...] = ()
        self._load(first=True)

    def _stat(self) -> tuple[int, int, int]:
        try:
            st = os.stat(self.path)
        except OSError:
            return (-1, -1, -1)
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _load(self, first: bool = False) -> None:
        stamp = self._stat()
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            self._entries = parse_tokens_file(self.path)
        except ConfigError as e:
            if first:
                raise
            self.log.error("tokens_reload_failed", error=e.message, note="keeping the previous tokens")
            return
        if not first:
            self.log.info("tokens_reloaded", tokens=len(self._entries))

    def lookup(self, token: str) -> Principal | None:
        self._load()
        if not token or len(token) > MAX_TOKEN_BYTES:
            return None
        want = bytes.fromhex(token_digest(token))
        found = None
        for e in self._entries:          # all of them, whatever matched: no early exit to time
            if hmac.compare_digest(e.digest, want):
                found = e.principal
        return found


def parse_tokens_file(path: str) -> tuple[_TokenEntry, ...]:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"tokens file {path!r} cannot be read: {e.strerror or e}", path=path) from None
    if len(raw) > MAX_TOKENS_FILE_BYTES:
        raise ConfigError(f"tokens file {path!r} is larger than {MAX_TOKENS_FILE_BYTES} bytes", path=path)
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"tokens file {path!r} is not valid TOML: {e}", path=path) from None
    table = doc.get("tokens", {})
    if not isinstance(table, dict) or set(doc) - {"tokens"}:
        raise ConfigError(f"tokens file {path!r}: only a [tokens.<name>] table per token is allowed", path=path)
    if len(table) > MAX_TOKENS:
        raise ConfigError(f"tokens file {path!r} holds more than {MAX_TOKENS} tokens", path=path)
    out = []
    for name, t in table.items():
        where = f"tokens file {path!r}, token {name!r}"
        if not isinstance(t, dict) or set(t) - {"roles", "sha256", "group", "broker_id"}:
            raise ConfigError(f"{where}: keys are roles, sha256, group, broker_id", path=path)
        digest = t.get("sha256", "")
        if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ConfigError(f"{where}: sha256 must be 64 lowercase hex digits", path=path)
        roles = parse_roles(t.get("roles", []), where)
        group, bid = t.get("group"), t.get("broker_id")
        if (group is None) != (bid is None):
            raise ConfigError(f"{where}: give both group and broker_id, or neither", path=path)
        if group is not None and (not isinstance(group, str) or not 0 < len(group) <= MAX_NAME_LEN
                                  or type(bid) is not int or not 1 <= bid <= MAX_BROKER_ID):
            raise ConfigError(f"{where}: bad group or broker_id", path=path)
        out.append(_TokenEntry(bytes.fromhex(digest), Principal(f"token:{name}", roles, group, bid, via="token")))
    return tuple(out)


@dataclass(frozen=True)
class AuthConfig:
    """``enabled``: check roles on every call (needs TLS or a tokens file to identify anyone)."""

    enabled: bool = False
    tokens_file: str = ""
    identities: Mapping[str, Any] = field(default_factory=dict)

    def validate(self) -> AuthConfig:
        IdentityMap(self.identities)
        if self.tokens_file:
            from autoswitch.base.config_check import check_path

            parse_tokens_file(check_path(self.tokens_file, "auth_tokens_file"))
        return self


class Authenticator:
    """``own_cluster``: the cluster our own certificate is bound to (autoswitch.base.tls
    ``urn:autoswitch:cluster:``). When set, a certificate that would be a peer (``controller/...``)
    is one only if it is bound to the same cluster: another cluster's controller under the same CA
    is nobody here (issue 29: any ``controller/*`` certificate could call a broker's TransferMaster)."""

    def __init__(self, cfg: AuthConfig, own_cluster: str | None = None) -> None:
        self.identities = IdentityMap(cfg.identities)
        self.tokens = TokenStore(cfg.tokens_file) if cfg.tokens_file else None
        self.own_cluster = own_cluster

    def principal(self, cn: str | None, metadata: Iterable[tuple[str, Any]] | None,
                  cluster: str | None = None) -> Principal | None:
        """The caller; ``None`` when a token was given but is unknown (or revoked). ``cluster``:
        the binding of the caller's certificate."""
        token = bearer_token(metadata)
        if token is not None:
            return self.tokens.lookup(token) if self.tokens is not None else None
        if cn is None:
            return ANONYMOUS
        p = self.identities.principal(cn)
        if Role.PEER in p.roles and self.own_cluster is not None and cluster != self.own_cluster:
            return Principal(cn, frozenset())
        return p


def bearer_token(metadata: Iterable[tuple[str, Any]] | None) -> str | None:
    for k, v in metadata or ():
        if k == "authorization":
            v = v.decode("latin-1") if isinstance(v, bytes) else str(v)
            scheme, _, rest = v.partition(" ")
            return rest.strip() if scheme.lower() == "bearer" else ""
    return None


# --------------------------------------------------------------------------- secure defaults

def check_exposure(tls: bool, auth: bool, allow_insecure: bool, addresses: Iterable[str]) -> None:
    """Secure defaults: a listener on a non-loopback address needs TLS and authorization, unless
    the operator wrote ``allow_insecure = true``."""
    if (tls and auth) or allow_insecure:
        return
    exposed = sorted(a for a in set(addresses) if a and not is_loopback(a))
    if exposed:
        missing = " and ".join(w for w, on in (("TLS", tls), ("auth", auth)) if not on)
        raise ConfigError(
            f"no {missing} on non-loopback addresses {exposed}: configure tls_ca/tls_cert/tls_key and "
            "auth = true, or set allow_insecure = true to accept an unauthenticated listener on that network",
            addresses=exposed)


def is_loopback(addr: str) -> bool:
    host = addr.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False    # a DNS name other than localhost may resolve anywhere


# --------------------------------------------------------------------------- rules

# What a request acts on, for a scoped broker: (group, brokerId or None for any id of the group).
Target = tuple[str, int | None]


@dataclass(frozen=True)
class Rule:
    """``roles``: any one of them allows the call. For a scoped broker, ``scope(request)`` names
    what the request acts on: every target must be its own group (and id, when given); a scope of
    None means "not for a scoped broker". No ``scope`` with the broker role: any broker may.
    ``expand(request)`` splits a batch into (method, request) pairs checked one by one."""

    roles: tuple[Role, ...]
    scope: Callable[[Any], Iterable[Target] | None] | None = None
    expand: Callable[[Any], Iterable[tuple[str, Any]]] | None = None


def allowed(p: Principal, rule: Rule, request: Any) -> Role | None:
    """None if ``p`` may make this call, else the role it lacks (the rule's first)."""
    for role in rule.roles:
        if role not in p.roles:
            continue
        if role is not Role.BROKER or not p.scoped or rule.scope is None:
            return None
        targets = rule.scope(request)
        if targets is not None and all(g == p.group and (b is None or b == p.broker_id) for g, b in targets):
            return None
    return rule.roles[0]


class Denied(Exception):
    def __init__(self, method: str, role: Role, principal: Principal, why: str = "") -> None:
        self.method, self.role, self.principal = method, role, principal
        detail = why or f"{method} needs role {role.value}"
        super().__init__(f"permission denied: {detail} ({principal.name} has "
                         f"{sorted(r.value for r in principal.roles) or 'no roles'}"
                         + (f", scoped to {principal.group}/{principal.broker_id}" if principal.scoped else "") + ")")


# The caller of the RPC being handled (set by the interceptor; each call runs in its own task, so
# a handler, and the calls of a Batch it fans out, see their own caller). None: auth is off.
_CALLER: contextvars.ContextVar[Principal | None] = contextvars.ContextVar("autoswitch_caller", default=None)


def current_caller() -> Principal | None:
    return _CALLER.get()


def set_caller(p: Principal | None) -> None:
    """The interceptor says who the call is from, for the handler (``current_caller``)."""
    _CALLER.set(p)


class Guard:
    """The policy of one server: method -> Rule, and the counters/log of denials."""

    def __init__(self, component: str, cfg: AuthConfig, rules: Mapping[str, Rule],
                 own_cluster: str | None = None) -> None:
        self.authn = Authenticator(cfg, own_cluster)
        self.rules = dict(rules)
        self.denied: dict[tuple[str, str], int] = {}
        self.log = get_logger(component)
        self._rl = RateLimitedLog(self.log)

    def check(self, p: Principal | None, method: str, request: Any) -> Principal:
        if p is None:
            self._count(ANONYMOUS, method, "token")
            raise Denied(method, Role.READER, ANONYMOUS, "unknown or revoked token")
        rule = self.rules.get(method)
        if rule is None:            # fail closed: a method nobody wrote a rule for
            self._count(p, method, "no_rule")
            raise Denied(method, Role.ADMIN, p, f"{method} has no rule")
        if rule.expand is not None:
            self.check_open(p, method)      # a batch of nothing still needs a caller with a role
            for sub_method, sub in rule.expand(request):
                self.check(p, sub_method, sub)
            return p
        missing = allowed(p, rule, request)
        if missing is not None:
            self._count(p, method, missing.value)
            raise Denied(method, missing, p)
        return p

    def check_open(self, p: Principal | None, method: str) -> None:
        """At the start of a streaming call: the caller holds one of the rule's roles (each
        message is then checked with ``check``, scope included)."""
        if p is None:
            self._count(ANONYMOUS, method, "token")
            raise Denied(method, Role.READER, ANONYMOUS, "unknown or revoked token")
        rule = self.rules.get(method)
        if rule is None or not p.roles.intersection(rule.roles):
            role = rule.roles[0] if rule is not None else Role.ADMIN
            self._count(p, method, role.value)
            raise Denied(method, role, p)

    def _count(self, p: Principal, method: str, role: str) -> None:
        key = (method, role)
        self.denied[key] = self.denied.get(key, 0) + 1
        self._rl.warning((p.name, method), "permission_denied", caller=p.name, via=p.via, method=method,
                         missing_role=role, scope=f"{p.group}/{p.broker_id}" if p.scoped else "")
