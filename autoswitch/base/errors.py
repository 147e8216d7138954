"""Root of the typed error hierarchy.

Every error that crosses a module boundary is an ``AutoswitchError`` with a
stable ``code`` string, so CLIs can print it as JSON and clients can branch on it.
Modules define their own subclasses next to the code that raises them.
"""

from __future__ import annotations


class AutoswitchError(Exception):
    code = "AUTOSWITCH_ERROR"

    def __init__(self, message: str, **details) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_dict(self) -> dict:
        out = {"code": self.code, "message": self.message}
        out.update({k: v for k, v in self.details.items() if v is not None})
        return out


class ConfigError(AutoswitchError):
    code = "CONFIG_ERROR"


class CorruptionError(AutoswitchError):
    """Stored bytes fail their checksum or structure check; never guessed around."""

    code = "CORRUPTION"


class FormatTooNew(AutoswitchError):
    """Stored bytes or a peer's frame carry a format version newer than this release reads (their
    checksum holds: not damage). Never treated as corruption, so a downgrade never cuts or
    rewrites what a newer release wrote: the process refuses and names the file or peer, the
    version found and the one it reads (docs/compatibility.md)."""

    code = "FORMAT_TOO_NEW"


def too_new(what: str, found: int, reads: int, **details: object) -> FormatTooNew:
    return FormatTooNew(f"{what} has format version {found}; this release (autoswitch {_version()}) reads "
                        f"version {reads}: run the release that wrote it, or a newer one (docs/compatibility.md)",
                        found=found, reads=reads, **details)


def _version() -> str:
    from autoswitch.base.version import VERSION

    return VERSION


class NotFound(AutoswitchError):
    """A named group, consumer group, broker or topic does not exist where it was asked for:
    never an empty success (a typo must not look like "nothing there")."""

    code = "NOT_FOUND"


class PermissionDenied(AutoswitchError):
    """The server checked who we are and refused the call (PERMISSION_DENIED, UNAUTHENTICATED):
    no retry and no other node will answer differently."""

    code = "PERMISSION_DENIED"
