"""The run marker of a broker's data directory: RocketMQ's abort file, extended to name the run.

Present at start = the last run did not end cleanly. Each run re-creates it naming the
incarnation a crash of the run continues and where the run ran (host and directory):
``durable-acks <incarnation> <place>`` when the run fsyncs before it acknowledges *and* started
with an intact log (a crash of it lost nothing it, or any run before it, acknowledged: the next
start is intact and continues it as a clean stop would), else ``unclean <incarnation> <place>``
(async flush: the log may lack an acknowledged tail; the next start is unclean but is still this
replica, so the controllers keep it as a last known holder). A marker from another place is a
copy of a running broker's directory: the next start is unclean and continues nothing. A clean
stop removes the marker and leaves the incarnation it ends in ``replicas.incarnation``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import Protocol

from autoswitch.base.fsutil import fsync_dir, write_atomic
from autoswitch.base.limits import MAX_INCARNATION_LEN
from autoswitch.base.log import EventLogger

ABORT_MARKER = "replicas.abort"  # exists while a broker runs; left behind by a crash
UNCLEAN_RUN = "unclean"      # the marker of any other run, + incarnation and place
DURABLE_RUN = "durable-acks"  # the marker of a run that fsynced every ack from an intact log, + incarnation
# where the host's identity is read (systemd, then D-Bus); none: the directory's path alone
MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")
INCARNATION_FILE = "replicas.incarnation"  # the incarnation that last stopped cleanly with this log


class MarkerFiles(Protocol):
    """Where a run marker keeps its two small files, and the place it names: the data directory
    (``DirectoryFiles``), or the data simulator's simulated disk. Writes are atomic and durable."""

    def read(self, name: str) -> bytes | None: ...
    def write(self, name: str, data: bytes) -> None: ...
    def remove(self, name: str) -> None: ...
    def place(self) -> str: ...


class DirectoryFiles:
    """The marker's files in a data directory (fsynced, renamed into place)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._place: str | None = None

    def read(self, name: str) -> bytes | None:
        try:
            return (self.directory / name).read_bytes()
        except FileNotFoundError:
            return None

    def write(self, name: str, data: bytes) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        write_atomic(self.directory / name, data)

    def remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.directory / name)
            fsync_dir(self.directory)

    def place(self) -> str:
        """This host (its machine id) and this data directory's path, hashed: where a run ran.
        Only a start in the same place continues a crashed run (the marker names both)."""
        if self._place is None:
            machine = ""
            for f in MACHINE_ID_FILES:
                with contextlib.suppress(OSError, UnicodeDecodeError):
                    machine = Path(f).read_text(encoding="ascii").strip()
                    break
            where = f"{machine}\0{self.directory.resolve()}".encode("utf-8", "replace")
            self._place = hashlib.sha256(where).hexdigest()[:16]
        return self._place


class RunMarker:
    """The marker of one data directory (its files: ``MarkerFiles``). ``durable_acks``: this
    broker fsyncs before it acknowledges, as master and as slave, so a crash of a run that started
    intact is not an unclean restart. The broker's adapter and the data simulator run this class
    as written (the simulator on its simulated disk)."""

    def __init__(self, files: MarkerFiles, durable_acks: bool, log: EventLogger) -> None:
        self.files = files
        self.durable_acks = durable_acks
        self.log = log
        self.run_durable = False        # a crash of this run loses nothing it acknowledged
        self.continues = ""             # the incarnation the marker names
        self._names_us = False

    def previous_incarnation(self) -> str:
        """The incarnation the last clean stop left ("" when none, or unreadable)."""
        raw = self.files.read(INCARNATION_FILE)
        try:
            text = raw.decode("ascii").strip() if raw is not None else ""
        except UnicodeDecodeError:
            return ""
        return text if len(text) <= MAX_INCARNATION_LEN and text.isalnum() else ""

    def arm(self, clean_stopped: str) -> tuple[bool, str, bool]:
        """At start: read what the last run left, write this run's marker. ``clean_stopped``: the
        incarnation a clean stop left. Returns (intact, the incarnation this start continues,
        crashed). ``crashed``: the last run did not stop cleanly, whatever its marker says. A
        durable run's crash lost nothing it acknowledged (intact), but its log may be shorter than
        a slave's in its own MasterEpoch (the master ships before its own fsync): such a start
        never resumes an epoch as master (docs/replicas-manager.md, "Durable acknowledgements")."""
        left = self.files.read(ABORT_MARKER)
        intact, continues = True, clean_stopped
        crashed = left is not None
        if left is not None:
            word, inc, where = (left.decode("ascii", "replace").split() + ["", "", ""])[:3]
            inc = "" if inc == "-" else inc
            known = word in (DURABLE_RUN, UNCLEAN_RUN) and (inc == "" or inc.isalnum()) \
                and len(inc) <= MAX_INCARNATION_LEN
            here = known and where == self.files.place()
            if known and not here:
                # written on another host or in another directory: a copy of a running broker's
                # directory. The run it names went on acknowledging after the copy was taken.
                self.log.warning("abort_marker_from_elsewhere", incarnation=inc,
                                 note="a copied data directory: started as an unclean new process")
            intact = here and word == DURABLE_RUN
            continues = inc if here else ""
            self.log.info("abort_marker_found", durableRun=intact, incarnation=continues)
        # until our registration is accepted a crash continues what this start continues
        self.run_durable = intact and self.durable_acks
        self._write(continues)
        return intact, continues, crashed

    def registered(self, incarnation: str) -> None:
        """The controllers accepted this run's registration: a crash now continues this run (until
        then it continues the one this start follows: the controllers never knew ours)."""
        if not self._names_us:
            self._write(incarnation)
            self._names_us = True

    def clean_stop(self, log_intact: bool, incarnation: str) -> None:
        """After the broker stopped and its store is flushed and closed: the next start reports
        an intact log, continuing ``incarnation``. Not when this run's log was never whole (it
        started after an unclean stop and had not caught up yet): a clean stop makes the files
        consistent, not complete, so the plain marker stays and the next start is unclean again
        (found by the data simulator's clean stops)."""
        if not log_intact:
            self.run_durable = False
            self._write(self.continues)
            self.log.warning("clean_shutdown_of_unclean_log", note="the next start reports an unclean restart "
                                                                   "until this replica has caught up")
            return
        self.files.write(INCARNATION_FILE, incarnation.encode("ascii"))
        self.files.remove(ABORT_MARKER)
        self.log.info("clean_shutdown_marked")

    def poison(self, why: str) -> bool:
        """An fsync failed: this run's acknowledgements may not be on disk, so its crash (the
        process ends now) is unclean, whatever the marker said. Best effort: the disk that failed
        the fsync may fail this write too (then the controllers' durable marks are the backstop:
        a replica whose log comes back below what it stated durable is not clean, docs/controller.md).
        True when the marker now says unclean."""
        self.run_durable = False
        try:
            self._write(self.continues)
        except Exception as e:  # noqa: BLE001 - the disk failed; the process ends either way
            self.log.error("abort_marker_not_rewritten", reason=why, error=repr(e),
                           note="the next start may report this crashed run as durable")
            return False
        self.log.warning("abort_marker_unclean", reason=why)
        return True

    def _write(self, continues: str) -> None:
        word = DURABLE_RUN if self.run_durable else UNCLEAN_RUN
        self.continues = continues
        self.files.write(ABORT_MARKER, f"{word} {continues or '-'} {self.files.place()}\n".encode("ascii"))
