"""The TLS and authorization keys a controller's and a broker's config share: the same flat keys
in both files (``tls_ca``, ``auth``, ...), the same checks, one owner. Each config inherits them
and adds which listeners they guard (``check_exposure`` takes those)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autoswitch.base.auth import AuthConfig
from autoswitch.base.errors import ConfigError
from autoswitch.base.tls import TLSConfig


@dataclass
class SecurityKeys:
    # TLS for the listeners and this process's own calls (autoswitch.base.tls). All empty = plaintext.
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    tls_require_client_cert: bool = True
    # The plaintext -> TLS migration, "accept both, then require TLS" (docs/security.md): accept
    # plaintext on the same ports as TLS; still dial others in plaintext (its first step).
    tls_accept_plaintext: bool = False
    tls_dial_plaintext: bool = False
    # Roles on every call (autoswitch.base.auth; docs/security.md): needs TLS. The tokens file is
    # re-read when it changes; identities map certificate CNs outside the naming conventions.
    auth: bool = False
    auth_tokens_file: str = ""
    auth_identities: dict[str, Any] = field(default_factory=dict)
    # Plaintext or no authorization on a non-loopback address must be asked for: an operator typo
    # must not expose an unauthenticated process to a network.
    allow_insecure: bool = False

    @property
    def tls(self) -> TLSConfig:
        return TLSConfig(ca=self.tls_ca, cert=self.tls_cert, key=self.tls_key,
                         require_client_cert=self.tls_require_client_cert,
                         accept_plaintext=self.tls_accept_plaintext, dial_plaintext=self.tls_dial_plaintext)

    @property
    def auth_config(self) -> AuthConfig:
        return AuthConfig(enabled=self.auth, tokens_file=self.auth_tokens_file, identities=self.auth_identities)

    def validate_security(self) -> None:
        """The checks both processes make: usable TLS files, and authorization only on TLS that
        every caller must use (a plaintext caller has no identity; tokens must not travel in clear)."""
        self.tls.validate(server=True)
        if self.auth and self.tls_accept_plaintext:
            raise ConfigError("auth = true with tls_accept_plaintext: plaintext callers have no identity; turn "
                              "auth on in the migration's last step, with TLS required", key="auth")
        if self.auth and not self.tls.enabled:
            raise ConfigError("auth = true needs TLS (tls_ca, tls_cert, tls_key): callers are identified by "
                              "their certificates or by tokens, which must not travel in clear", key="auth")
        self.auth_config.validate()

    @property
    def callers_authenticated(self) -> bool:
        """Every caller of the gRPC listeners is authenticated (TLS required, no plaintext accepted)."""
        return self.tls.enabled and not self.tls_accept_plaintext
