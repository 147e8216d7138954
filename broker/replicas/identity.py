"""The broker identity files (RocketMQ's broker metadata + temp metadata files).

``brokerIdentity`` holds ``cluster#brokerName#brokerId``; ``brokerIdentity.temp``
holds ``cluster#brokerName#brokerId#registerCheckCode`` while a registration is in
progress. Each file is three lines: ``format=1``, the payload and ``crc32=<8 hex>`` of the
first two, so a torn or edited file is refused (IdentityFileCorrupt naming the file) instead
of silently making the broker a new replica, and a later format is refused by name. Writes go to a scratch file, fsync,
rename over the target, fsync the directory: a crash leaves the old or the new
file, never a mix.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass
from pathlib import Path

from autoswitch.base.errors import ConfigError, CorruptionError, too_new
from autoswitch.base.fsutil import fsync_dir, write_atomic
from autoswitch.base.limits import MAX_NAME_LEN
from autoswitch.base.log import get_logger

IDENTITY_FILE = "brokerIdentity"
TEMP_IDENTITY_FILE = "brokerIdentity.temp"
_SCRATCH_SUFFIX = ".swp"
MAX_FILE_BYTES = 4096
MAX_CHECK_CODE_BYTES = 255
FORMAT_KEY = "format="
FORMAT_VERSION = 1      # the files' layout (docs/compatibility.md)

_log = get_logger("broker.identity")


class IdentityFileCorrupt(CorruptionError):
    code = "IDENTITY_FILE_CORRUPT"


class IdentityMismatch(ConfigError):
    """The identity on disk belongs to another cluster or broker group."""

    code = "IDENTITY_MISMATCH"


def _check_name(value: str, what: str) -> None:
    # the controllers' name limit (base/limits.py): a name they accept is one the identity file holds
    if not value or "#" in value or "\n" in value or "\r" in value or len(value) > MAX_NAME_LEN:
        raise ValueError(f"{what} must be 1..{MAX_NAME_LEN} characters without '#' or newlines: {value!r}")


@dataclass(frozen=True)
class BrokerIdentity:
    cluster: str
    group: str  # RocketMQ's brokerName
    broker_id: int

    def __post_init__(self) -> None:
        _check_name(self.cluster, "cluster")
        _check_name(self.group, "group")
        if not isinstance(self.broker_id, int) or self.broker_id < 1:
            raise ValueError(f"brokerId must be an int >= 1: {self.broker_id!r}")

    def encode(self) -> str:
        return f"{self.cluster}#{self.group}#{self.broker_id}"


@dataclass(frozen=True)
class TempIdentity:
    cluster: str
    group: str
    broker_id: int
    register_check_code: str

    def __post_init__(self) -> None:
        BrokerIdentity(self.cluster, self.group, self.broker_id)  # same field rules
        _check_name(self.register_check_code, "registerCheckCode")

    def encode(self) -> str:
        return f"{self.cluster}#{self.group}#{self.broker_id}#{self.register_check_code}"

    def identity(self) -> BrokerIdentity:
        return BrokerIdentity(self.cluster, self.group, self.broker_id)


@dataclass(frozen=True)
class LoadedIdentity:
    identity: BrokerIdentity | None
    temp: TempIdentity | None


def _frame(payload: str) -> bytes:
    head = f"{FORMAT_KEY}{FORMAT_VERSION}\n".encode() + payload.encode()
    return head + b"\n" + f"crc32={zlib.crc32(head):08x}\n".encode()


def _unframe(path: Path, data: bytes) -> str:
    """``format=<n>\\n<payload>\\ncrc32=<hex of the first two lines>\\n``. A later format (its CRC
    holds) is refused by name (FormatTooNew), never read as damage: a broker must not start as a
    new replica because an older release could not read its identity."""
    if len(data) > MAX_FILE_BYTES:
        raise IdentityFileCorrupt(f"{path}: larger than {MAX_FILE_BYTES} bytes", path=str(path))
    lines = data.split(b"\n")
    if len(lines) != 4 or lines[3] != b"" or not lines[0].startswith(FORMAT_KEY.encode()) \
            or not lines[2].startswith(b"crc32="):
        raise IdentityFileCorrupt(f"{path}: expected 'format=<n>\\n<payload>\\ncrc32=<hex>\\n'", path=str(path))
    head, crc_text = lines[0] + b"\n" + lines[1], lines[2][len(b"crc32=") :]
    try:
        crc = int(crc_text, 16)
    except ValueError:
        raise IdentityFileCorrupt(f"{path}: bad crc field {crc_text!r}", path=str(path)) from None
    if len(crc_text) != 8 or zlib.crc32(head) != crc:
        raise IdentityFileCorrupt(f"{path}: crc mismatch", path=str(path))
    version_text = lines[0][len(FORMAT_KEY):]
    if not version_text.isdigit() or len(version_text) > 5:
        raise IdentityFileCorrupt(f"{path}: bad format field {version_text[:16]!r}", path=str(path))
    if int(version_text) > FORMAT_VERSION:
        raise too_new(f"identity file {path}", int(version_text), FORMAT_VERSION, path=str(path))
    if int(version_text) != FORMAT_VERSION:
        raise IdentityFileCorrupt(f"{path}: unknown format {int(version_text)}", path=str(path))
    try:
        return lines[1].decode()
    except UnicodeDecodeError:
        raise IdentityFileCorrupt(f"{path}: payload is not UTF-8", path=str(path)) from None


def _parse_id(path: Path, text: str) -> int:
    if not text.isdigit() or (len(text) > 1 and text[0] == "0") or len(text) > 19:
        raise IdentityFileCorrupt(f"{path}: bad brokerId {text!r}", path=str(path))
    return int(text)


def parse_identity(path: Path, data: bytes) -> BrokerIdentity:
    parts = _unframe(path, data).split("#")
    if len(parts) != 3:
        raise IdentityFileCorrupt(f"{path}: expected cluster#brokerName#brokerId", path=str(path))
    try:
        return BrokerIdentity(parts[0], parts[1], _parse_id(path, parts[2]))
    except ValueError as e:
        raise IdentityFileCorrupt(f"{path}: {e}", path=str(path)) from None


def parse_temp(path: Path, data: bytes) -> TempIdentity:
    parts = _unframe(path, data).split("#")
    if len(parts) != 4:
        raise IdentityFileCorrupt(f"{path}: expected cluster#brokerName#brokerId#registerCheckCode", path=str(path))
    try:
        return TempIdentity(parts[0], parts[1], _parse_id(path, parts[2]), parts[3])
    except ValueError as e:
        raise IdentityFileCorrupt(f"{path}: {e}", path=str(path)) from None


class IdentityStore:
    """The two identity files of one broker data directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.identity_path = self.directory / IDENTITY_FILE
        self.temp_path = self.directory / TEMP_IDENTITY_FILE

    def _read(self, path: Path) -> bytes | None:
        try:
            with open(path, "rb") as f:
                return f.read(MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            return None

    def load(self, cluster: str | None = None, group: str | None = None) -> LoadedIdentity:
        """Both files, parsed strictly. With cluster/group given, a file for another group is refused."""
        raw_id = self._read(self.identity_path)
        raw_temp = self._read(self.temp_path)
        identity = parse_identity(self.identity_path, raw_id) if raw_id is not None else None
        temp = parse_temp(self.temp_path, raw_temp) if raw_temp is not None else None
        for path, item in ((self.identity_path, identity), (self.temp_path, temp)):
            if item is None or cluster is None or group is None:
                continue
            if (item.cluster, item.group) != (cluster, group):
                raise IdentityMismatch(
                    f"{path} belongs to {item.cluster}#{item.group}, this broker is {cluster}#{group}",
                    path=str(path),
                )
        return LoadedIdentity(identity, temp)

    def write_temp(self, temp: TempIdentity) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        write_atomic(self.temp_path, _frame(temp.encode()), suffix=_SCRATCH_SUFFIX)
        _log.info("temp_identity_written", path=str(self.temp_path), brokerId=temp.broker_id, group=temp.group)

    def commit(self, identity: BrokerIdentity) -> None:
        """Write the identity file, then drop the temp file. A crash in between leaves both;
        the identity file wins on the next start."""
        self.directory.mkdir(parents=True, exist_ok=True)
        write_atomic(self.identity_path, _frame(identity.encode()), suffix=_SCRATCH_SUFFIX)
        self.remove_temp()
        _log.info("identity_written", path=str(self.identity_path), brokerId=identity.broker_id, group=identity.group)

    def remove_temp(self) -> None:
        try:
            os.unlink(self.temp_path)
        except FileNotFoundError:
            return
        fsync_dir(self.directory)
