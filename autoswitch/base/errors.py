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


class NotFound(AutoswitchError):
    """A named group, consumer group, broker or topic does not exist where it was asked for:
    never an empty success (a typo must not look like "nothing there")."""

    code = "NOT_FOUND"


class PermissionDenied(AutoswitchError):
    """The server checked who we are and refused the call (PERMISSION_DENIED, UNAUTHENTICATED):
    no retry and no other node will answer differently."""

    code = "PERMISSION_DENIED"
