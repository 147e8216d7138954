"""A real process appends to FileStorage and reports each batch only after save() returned
(fsync); we SIGKILL it mid-stream, reopen, and every reported entry and hard state is there.
Repeated, so each round also recovers and continues the previous round's files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from autoswitch.controller.raft.storage import FileStorage

pytestmark = pytest.mark.integration

CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path
    from autoswitch.controller.raft.messages import Entry, HardState
    from autoswitch.controller.raft.storage import FileStorage
    s = FileStorage(Path(sys.argv[1]), segment_bytes=4096)
    rec = s.load()
    last = rec.entries[-1].index if rec.entries else 0
    term = rec.hard_state.term
    while True:
        term += 1
        batch = [Entry(last + k, term, b"x" * (k * 7)) for k in range(1, 6)]
        s.save(HardState(term, "n1", last), batch)
        last = batch[-1].index
        print(last, term, flush=True)
""")


def test_sigkill_never_loses_an_acknowledged_entry_or_hard_state(tmp_path):
    for _round in range(2):
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE,
                                text=True, start_new_session=True)
        acked = (0, 0)
        try:
            assert proc.stdout is not None
            for _ in range(15):
                line = proc.stdout.readline()
                assert line, "writer died before 15 batches"
                i, t = line.split()
                acked = (int(i), int(t))
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        rec = FileStorage(tmp_path, segment_bytes=4096).load()
        assert rec.entries and rec.entries[-1].index >= acked[0]
        assert rec.hard_state.term >= acked[1] and rec.hard_state.vote == "n1"
        assert [e.index for e in rec.entries] == list(range(1, rec.entries[-1].index + 1))
