"""A linearizability checker (Wing & Gong search with Lowe's/Porcupine's memoisation).

A history is a list of ``Op(client, key, input, output, call, ret)``: invoke and return times
from one clock. An op whose outcome is unknown (timeout, connection lost) has ``ret=None`` and
``output=None``: it may take effect at any point after its call, or never (it linearizes after
everything else). The history is split by ``key`` (P-compositionality: independent objects) and
each part is searched depth-first over the "minimal" calls, caching (linearized set, state) pairs
so that no configuration is explored twice. Every search is bounded by ``max_steps``.

Models (``Model``): ``RegisterModel`` (read/write/cas) and ``BrokerIdModel``, the controller's
GetNextBrokerId / ApplyBrokerId per broker group (a counter with idempotent claims).

History files are JSON lines, one op per line:
``{"client": 3, "key": "g1", "input": ["apply", 2, "code-7"], "output": "ok", "call": 10.2, "ret": 10.9}``
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

MAX_OPS_PER_KEY = 10_000


@dataclass(frozen=True)
class Op:
    client: int
    key: str
    input: Any
    output: Any
    call: float
    ret: float | None      # None: outcome unknown

    @staticmethod
    def from_dict(d: dict) -> Op:
        inp = d["input"]
        return Op(int(d["client"]), str(d.get("key", "")), tuple(inp) if isinstance(inp, list) else inp,
                  d.get("output"), float(d["call"]), None if d.get("ret") is None else float(d["ret"]))


class Model(Protocol):
    def init(self) -> Hashable: ...
    def step(self, state: Hashable, inp: Any, out: Any) -> tuple[bool, Hashable]:
        """Is ``out`` a legal answer to ``inp`` in ``state``? And the state after. ``out is None``
        means unknown: any answer is accepted."""


class RegisterModel:
    """('w', v) -> 'ok'; ('r',) -> v; ('cas', old, new) -> True/False."""

    def __init__(self, initial: Any = None) -> None:
        self.initial = initial

    def init(self) -> Hashable:
        return self.initial

    def step(self, state, inp, out):
        kind = inp[0]
        if kind == "w":
            return True, inp[1]
        if kind == "r":
            return out is None or out == state, state
        if kind == "cas":
            hit = state == inp[1]
            if out is not None and bool(out) != hit:
                return False, state
            return True, inp[2] if hit else state
        raise ValueError(f"unknown register op {inp!r}")


class BrokerIdModel:
    """One broker group on the controller (statemachine._apply_broker_id):
    ('next',) -> nextAssignBrokerId; ('apply', id, code) -> 'ok' | 'invalid'.
    State: (next id, frozenset of (id, code) claims)."""

    def init(self) -> Hashable:
        return (1, frozenset())

    def step(self, state, inp, out):
        nxt, claims = state
        if inp[0] == "next":
            return out is None or out == nxt, state
        if inp[0] == "apply":
            bid, code = inp[1], inp[2]
            owner = next((c for i, c in claims if i == bid), None)
            if owner is not None:
                ok = owner == code
                return out is None or out == ("ok" if ok else "invalid"), state
            if bid < 1:     # no CleanBrokerData here: no retired ids; any unclaimed id is free
                return out is None or out == "invalid", state
            if out == "invalid":
                return False, state
            return True, (max(nxt, bid + 1), claims | {(bid, code)})
        raise ValueError(f"unknown broker-id op {inp!r}")


@dataclass
class Result:
    ok: bool
    unknown: bool = False               # a search hit max_steps: no verdict
    bad_key: str | None = None
    detail: str = ""
    steps: int = 0
    ops: int = 0
    keys: int = 0
    partial: list[Op] = field(default_factory=list)   # longest linearizable prefix found (diagnostics)


class _Node:
    __slots__ = ("op_id", "is_call", "match", "prev", "next")

    def __init__(self, op_id: int, is_call: bool) -> None:
        self.op_id = op_id
        self.is_call = is_call
        self.match: _Node | None = None
        self.prev: _Node | None = None
        self.next: _Node | None = None


def _check_one(ops: list[Op], model: Model, max_steps: int) -> tuple[bool | None, int, list[int]]:
    n = len(ops)
    assert n <= MAX_OPS_PER_KEY, f"{n} ops on one key: split the history"
    events: list[tuple[float, int, int, bool]] = []
    for i, o in enumerate(ops):
        if o.ret is not None and o.ret < o.call:
            raise ValueError(f"op returns before its call: {o}")
        events.append((o.call, 0, i, True))
        # calls sort before returns at the same instant: overlapping is the permissive reading
        events.append((math.inf if o.ret is None else o.ret, 1, i, False))
    events.sort()
    head = _Node(-1, False)
    calls: dict[int, _Node] = {}
    prev = head
    for _, _, i, is_call in events:
        nd = _Node(i, is_call)
        if is_call:
            calls[i] = nd
        else:
            calls[i].match = nd
        prev.next, nd.prev = nd, prev
        prev = nd

    def lift(nd: _Node) -> None:
        nd.prev.next = nd.next
        if nd.next:
            nd.next.prev = nd.prev
        m = nd.match
        m.prev.next = m.next
        if m.next:
            m.next.prev = m.prev

    def unlift(nd: _Node) -> None:
        m = nd.match
        m.prev.next = m
        if m.next:
            m.next.prev = m
        nd.prev.next = nd
        if nd.next:
            nd.next.prev = nd

    state = model.init()
    linearized = 0
    cache: set[tuple[int, Hashable]] = set()
    stack: list[tuple[_Node, Hashable]] = []
    best: list[int] = []
    entry = head.next
    steps = 0
    while head.next is not None:
        steps += 1
        if steps > max_steps:
            return None, steps, best
        if entry is None:
            # only unknown-outcome calls are left unmatched past the end: cannot happen (their
            # returns sit at +inf), kept as a guard
            return False, steps, best
        if entry.is_call:
            o = ops[entry.op_id]
            ok, new_state = model.step(state, o.input, o.output)
            if ok:
                lin2 = linearized | (1 << entry.op_id)
                key = (lin2, new_state)
                if key not in cache:
                    cache.add(key)
                    stack.append((entry, state))
                    state, linearized = new_state, lin2
                    lift(entry)
                    if len(stack) > len(best):
                        best = [e.op_id for e, _ in stack]
                    entry = head.next
                    continue
            entry = entry.next
        else:
            # a return whose call is not linearized yet: backtrack
            if not stack:
                return False, steps, best
            top, state = stack.pop()
            linearized &= ~(1 << top.op_id)
            unlift(top)
            entry = top.next
    return True, steps, best


def check(ops: Iterable[Op], model_for: Any, max_steps: int = 2_000_000) -> Result:
    """``model_for``: a Model, or a callable key -> Model (different objects per key)."""
    by_key: dict[str, list[Op]] = {}
    for o in ops:
        by_key.setdefault(o.key, []).append(o)
    total = 0
    for key in sorted(by_key):
        part = by_key[key]
        model = model_for(key) if callable(model_for) and not hasattr(model_for, "step") else model_for
        ok, steps, best = _check_one(part, model, max_steps)
        total += steps
        if ok is None:
            return Result(False, True, key, f"search bound {max_steps} reached on key {key!r}", total,
                          sum(map(len, by_key.values())), len(by_key))
        if not ok:
            return Result(False, False, key, f"key {key!r}: no linearization of {len(part)} ops", total,
                          sum(map(len, by_key.values())), len(by_key), [part[i] for i in best])
    return Result(True, False, None, "linearizable", total, sum(map(len, by_key.values())), len(by_key))


def load_jsonl(path: Path) -> list[Op]:
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                out.append(Op.from_dict(json.loads(line)))
    return out


def dump_jsonl(ops: Iterable[Op], path: Path) -> None:
    with open(path, "w") as f:
        for o in ops:
            f.write(json.dumps({"client": o.client, "key": o.key, "input": list(o.input), "output": o.output,
                                "call": o.call, "ret": o.ret}) + "\n")


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.sim.lincheck HISTORY.jsonl [--model brokerid|register]``"""
    import argparse
    ap = argparse.ArgumentParser(prog="python -m tests.sim.lincheck")
    ap.add_argument("history")
    ap.add_argument("--model", choices=("brokerid", "register"), default="brokerid")
    a = ap.parse_args(argv)
    model = BrokerIdModel() if a.model == "brokerid" else RegisterModel()
    r = check(load_jsonl(Path(a.history)), model)
    print(json.dumps({"ok": r.ok, "unknown": r.unknown, "key": r.bad_key, "detail": r.detail, "ops": r.ops,
                      "keys": r.keys, "steps": r.steps}))
    return 0 if r.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
