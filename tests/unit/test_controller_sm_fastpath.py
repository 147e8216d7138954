"""The per-write fast paths agree with the plain rules they shortcut.

eventlog.py and statemachine.py take shortcuts on the apply path (cached field lists, a
hand-written events.jsonl line, history records from the staged groups instead of a replay, the
reply's view reused for watchers); messages.py checks field ranges by msgspec constraints on the
field types. Each test here holds one against the plain rule it implements: the same accept/reject
decisions, the same bytes, the same records.
"""

from __future__ import annotations

import enum
import json

import msgspec
from autoswitch.controller import messages as m
from autoswitch.controller.server import eventlog
from autoswitch.controller.server import sm_adapter as sa
from autoswitch.controller.state import explain
from autoswitch.controller.state.history import (
    HistoryRecord,
    decode_record,
    encode_record,
    event_history_record,
)
from autoswitch.controller.state.sm_config import SMConfig
from autoswitch.controller.state.staged import Staged as _Staged
from autoswitch.controller.state.statemachine import ControllerStateMachine, _handle
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec.structs import force_setattr

from tests.unit.test_controller_sm_props import PRELUDE, json_values, ops, to_request


class _IntE(enum.IntEnum):
    ONE = 1
    BIG = 2**40


scalars = (st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.floats(allow_nan=False)
           | st.text(max_size=6) | st.sampled_from(["\ud800", "a\udfff", "é", "x" * 300, "", _IntE.ONE, _IntE.BIG]))
values = scalars | st.lists(scalars, max_size=4) | st.lists(scalars, max_size=4).map(tuple) \
    | st.lists(st.integers(-2, 70), max_size=70).map(tuple) | st.frozensets(st.integers(0, 5))


def _outcome(fn, *args):
    try:
        fn(*args)
    except m.MalformedRequest as e:
        return ("rejected", e.message)
    return ("ok",)


# --------------------------------------------------------------------------- field ranges
#
# The ranges are msgspec constraints on the field types; these plain rules are the spec they
# implement (docs/controller-protocol.md): held against arbitrary values put into valid requests.


def _int_in(lo, hi):
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def _text(max_len, empty):
    def ok(v):
        if not isinstance(v, str) or len(v) > max_len or (not empty and not v):
            return False
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    return ok


def _ids(min_len):
    # any collection: the log form is a JSON array either way
    return lambda v: (isinstance(v, tuple | list | set | frozenset) and min_len <= len(v) <= m.MAX_REPLICAS_PER_GROUP
                      and all(_int_in(1, m.MAX_BROKER_ID)(x) for x in v) and len(set(v)) == len(v))


_COUNT = _int_in(0, m.MAX_INT64)
SPEC = {
    m.AlterSyncStateSetRequest(broker_name="g", master_broker_id=1, master_epoch=0, new_sync_state_set=(1, 2),
                               sync_state_set_epoch=0, alive_broker_ids=(2,), ts_ms=5): {
        "broker_name": _text(m.MAX_NAME_LEN, False), "master_broker_id": _int_in(1, m.MAX_BROKER_ID),
        "master_epoch": _COUNT, "new_sync_state_set": _ids(1), "sync_state_set_epoch": _COUNT,
        "alive_broker_ids": _ids(0), "ts_ms": _COUNT,
        "master_min_in_sync_replicas": _int_in(0, m.MAX_REPLICAS_PER_GROUP)},
    m.RegisterBrokerRequest(cluster_name="c", broker_name="g", broker_id=1, broker_address="a:1"): {
        "cluster_name": _text(m.MAX_NAME_LEN, False), "broker_id": _int_in(1, m.MAX_BROKER_ID),
        "broker_address": _text(m.MAX_ADDRESS_LEN, False), "broker_ha_address": _text(m.MAX_ADDRESS_LEN, True),
        "incarnation": _text(m.MAX_INCARNATION_LEN, True), "clean_shutdown": lambda v: type(v) is bool},
    m.ElectMasterRequest(cluster_name="", broker_name="g"): {
        "cluster_name": _text(m.MAX_NAME_LEN, True), "broker_id": _int_in(0, m.MAX_BROKER_ID),
        "trigger": lambda v: v in ("broker", "controller", "admin"), "dead_broker_ids": _ids(0),
        "expect_master_epoch": _COUNT},
    m.AdminAuditRequest(actor="a", action="x"): {
        "actor": _text(m.MAX_AUDIT_FIELD_LEN, False), "code": _int_in(m.MIN_INT32, m.MAX_INT32),
        "detail": _text(m.MAX_AUDIT_FIELD_LEN, True)},
}
CASES = [(req, f, rule) for req, rules in SPEC.items() for f, rule in rules.items()]


@settings(max_examples=1500, deadline=None)
@given(st.sampled_from(CASES), values | st.sampled_from([m.MAX_INT64, m.MAX_INT64 + 1, m.MAX_BROKER_ID + 1,
                                                         "x" * 128, "x" * 255, "x" * 256, (1, 1), (1,) * 65]))
def test_a_field_is_accepted_exactly_when_its_plain_rule_holds(case, v):
    req, field, rule = case
    one = msgspec.structs.replace(req)
    force_setattr(one, field, v)
    out = _outcome(m.check_request, one)
    assert (out == ("ok",)) == rule(v), (field, v, out)
    if out != ("ok",):
        assert field in out[1] or "duplicates" in out[1] or "encoded" in out[1], out


def _plain_post_init(req):
    """The rule Request.__post_init__ shortcuts: every field's list or set becomes a tuple."""
    for name in req.__struct_fields__:
        v = getattr(req, name)
        if isinstance(v, list):
            force_setattr(req, name, tuple(v))
        elif isinstance(v, set | frozenset):
            try:
                force_setattr(req, name, tuple(sorted(v)))
            except TypeError:
                pass


def _checked(req):
    try:
        return ("ok", m.check_request(req))
    except m.MalformedRequest as e:
        return ("rejected", e.message)


@settings(max_examples=1500, deadline=None)
@given(st.sampled_from(CASES), values)
def test_post_init_normalizes_only_collection_fields_and_the_checks_decide_alike(case, v):
    """__post_init__ looks only at the fields whose type admits a collection (it runs on every
    decode); a list or set anywhere else is refused by the check as its tuple would be."""
    req, field, _rule = case
    fast, plain = msgspec.structs.replace(req), msgspec.structs.replace(req)
    force_setattr(fast, field, v)
    force_setattr(plain, field, v)
    fast.__post_init__()
    _plain_post_init(plain)
    outcome = _checked(plain)
    assert _checked(fast) == outcome, (field, v)
    if outcome[0] == "ok":      # the servicer uses the request as built, not only its check
        assert fast == plain, (field, v)


def test_a_request_that_passes_check_request_is_one_the_log_accepts():
    for req in SPEC:
        assert m.check_request(req) == req
        assert m.decode_request(m.encode_request(req)) == req


# --------------------------------------------------------------------------- Raft log codec


def _decoded(data):
    try:
        req = m.decode_request(data)
    except m.MalformedRequest as e:
        return ("rejected", e.message)
    return ("ok", req)


field_names = st.sampled_from(["cluster_name", "broker_name", "applied_broker_id", "register_check_code",
                               "broker_id", "broker_address", "clean_shutdown", "trigger", "designate", "alive",
                               "dead_broker_ids", "master_broker_id", "master_epoch", "new_sync_state_set",
                               "sync_state_set_epoch", "alive_broker_ids", "broker_ids", "clean_living_broker",
                               "config", "ts_ms", "handover_from", "expect_master_epoch",
                               "expect_sync_state_set_epoch", "t"])
types = st.sampled_from(sorted(m.WRITE_REQUESTS))
good = {"cluster_name": "c", "broker_name": "g", "applied_broker_id": 1, "register_check_code": "a;1",
        "broker_id": 1, "broker_address": "a:1", "master_broker_id": 1, "master_epoch": 0,
        "new_sync_state_set": [1], "sync_state_set_epoch": 0, "config": {"k": "v"}, "ts_ms": 5}


def _entry(t, base, fuzz, drop, ws):
    names = set(m.WRITE_REQUESTS[t].__struct_fields__)
    obj = {"t": t, **{k: v for k, v in base.items() if k in names and k not in drop}, **fuzz}
    text = json.dumps(obj, ensure_ascii=False)
    return ((" " if ws else "") + text).encode("utf-8", "surrogatepass")


entries = st.one_of(
    st.binary(max_size=120),
    st.builds(_entry, types, st.just(good), st.dictionaries(field_names, json_values, max_size=3),
              st.sets(field_names, max_size=2), st.booleans()),
    st.builds(_entry, types, st.just({}), st.dictionaries(field_names, json_values, max_size=8),
              st.just(set()), st.booleans()),
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries)
def test_any_entry_decodes_to_a_valid_request_or_a_typed_refusal(data):
    """Arbitrary and mutated log entries: a MalformedRequest or a request that validates and
    survives a second round trip unchanged; never another exception."""
    out = _decoded(data)
    if out[0] == "ok":
        req = out[1]
        assert m.check_request(req) == req
        again = m.encode_request(req)
        assert m.decode_request(again) == req
        assert json.loads(again)["t"] == req.TYPE


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, min_size=5, max_size=40))
def test_encode_round_trips_and_the_log_form_is_greppable_json(seq):
    sm = ControllerStateMachine(SMConfig(first_election_grace_ms=0))
    for i, op in enumerate(PRELUDE + seq, start=1):
        req = to_request(op, sm, ts=1000 + i)
        data = m.encode_request(req)
        assert m.decode_request(data) == req
        obj = json.loads(data)
        # fields at their default are left out (an older controller can still apply the entry
        # unless it uses a field added since; docs/operations-controller.md)
        defaults = {f.name for f in msgspec.structs.fields(req) if f.required is False
                    and getattr(req, f.name) == (f.default if f.default is not msgspec.NODEFAULT else f.default_factory())}
        assert set(obj) == {"t", *type(req).__struct_fields__} - defaults and obj["t"] == req.TYPE
        sm.apply(i, data)


def test_missing_fields_wrong_types_and_unknown_fields_are_refused_by_name():
    assert _decoded(b'{"t":"AlterSyncStateSet","broker_name":"g"}') == \
        ("rejected", "bad request entry: Object missing required field `master_broker_id`")
    r = _decoded(b'{"t":"RegisterBroker","cluster_name":"c","broker_name":"g","broker_id":true,'
                 b'"broker_address":"a:1"}')
    assert r[0] == "rejected" and "`$.broker_id`" in r[1]
    r = _decoded(b'{"t":"ApplyBrokerId","cluster_name":"c","broker_name":"g","applied_broker_id":1,'
                 b'"register_check_code":"x","extra":1}')
    assert r[0] == "rejected" and "unknown field `extra`" in r[1]
    r = _decoded(b'{"t":"UpdateControllerConfig","ts_ms":1}')
    assert r == ("rejected", "bad request entry: Object missing required field `config`")
    assert _decoded(b'{"t":"Nope"}')[0] == "rejected"


# --------------------------------------------------------------------------- events.jsonl


history_record = st.builds(
    HistoryRecord, ts_ms=st.integers(0, 2**63 - 1), index=st.integers(1, 2**40), group=st.text(),
    event=st.sampled_from(["AlterSyncStateSet", "NoMaster", "ElectMaster", "AdminAudit"]),
    master_broker_id=st.none() | st.integers(1, 9), master_epoch=st.integers(0, 9),
    sync_state_set=st.lists(st.integers(1, 9), max_size=4, unique=True).map(lambda v: tuple(sorted(v))),
    sync_state_set_epoch=st.integers(0, 9), reason=st.text(), unclean=st.booleans(),
    actor=st.sampled_from(["", "admin/ops"]), trigger=st.sampled_from(["", "controller", "handover"]),
    crash=st.booleans())


@settings(max_examples=300, deadline=None)
@given(history_record)
def test_a_history_line_is_the_record_with_sorted_keys_and_reads_back_equal(rec):
    line = encode_record(rec)
    as_json = json.loads(line)
    assert list(as_json) == sorted(as_json), "keys in name order, as events.jsonl always had them"
    assert decode_record(line) == rec
    # what a reader of older files relies on: these keys are always there
    assert {"ts_ms", "index", "group", "event", "master_broker_id", "master_epoch", "sync_state_set",
            "sync_state_set_epoch", "reason", "unclean"} <= set(as_json)
    assert ("actor" in as_json) == bool(rec.actor) and ("trigger" in as_json) == bool(rec.trigger)


def test_eventlog_lines_and_offsets(tmp_path):
    log = eventlog.EventLog(tmp_path / "events.jsonl")
    base = dict(ts_ms=1, group="g", event="ElectMaster", master_broker_id=None, master_epoch=1,
                sync_state_set=(1, 2), sync_state_set_epoch=1, reason="é", unclean=False)
    recs = [HistoryRecord(index=1, **base), HistoryRecord(index=2, **{**base, "event": "AdminAudit"}, actor="a"),
            HistoryRecord(index=3, **{**base, "master_broker_id": 2, "unclean": True}, trigger="controller")]
    for r in recs:
        assert log.append(r)
    lines, nxt, eof = log.read(0, 10)
    assert eof and nxt == 3
    assert [decode_record(line) for line in lines] == recs
    assert log.read(2, 1)[0] == lines[2:]
    log.close()
    again = eventlog.EventLog(tmp_path / "events.jsonl")
    assert not again.append(recs[1])        # written by the previous run already
    four = HistoryRecord(index=4, **base)
    assert len(again) == 3 and again.append(four) and decode_record(again.read(3, 1)[0][0]) == four
    again.close()


# --------------------------------------------------------------------------- apply path


def _reference_records(req, state, index):
    """History records as execute() built them before: replay the events on a scratch stage."""
    events, reply, _staged = _handle(req, state)
    # the entry's decision record, as execute() numbers it, rides on the events it decided
    decision = explain.to_json(msgspec.structs.replace(reply.decision, index=index)) if reply.decision else ""
    scratch = _Staged(state)
    out = []
    for ev in events:
        scratch.apply(ev)
        out.append(event_history_record(ev, index, getattr(req, "ts_ms", 0), scratch.group(ev.broker_name),
                                        decision))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, min_size=10, max_size=60))
def test_records_and_watcher_infos_match_the_reference(seq):
    records: list[HistoryRecord] = []
    notified: list[tuple[int, str, dict]] = []

    class Sink:
        def append(self, rec):
            records.append(rec)

    class Log:
        def error(self, *a, **k):
            raise AssertionError((a, k))

    asm = sa.AppliedStateMachine({"first_election_grace_ms": "0"}, Sink(),
                                 lambda i, g, info: notified.append((i, g, info)), Log())
    published: dict[str, dict] = {}
    for i, op in enumerate(PRELUDE + seq, start=1):
        req = to_request(op, asm.inner, ts=1000 + i)
        want = _reference_records(req, asm.inner.state, i)
        n_rec, n_note = len(records), len(notified)
        asm.apply(i, m.encode_request(req))
        assert records[n_rec:] == want
        # Watchers: exactly the touched groups whose info changed, with the info recomputed now.
        expect = []
        for group in dict.fromkeys(r.group for r in want if r.event != "UpdateConfig"):
            info = asm.inner.replica_view(group)
            if info != published.get(group):
                if info is None:
                    published.pop(group, None)
                else:
                    published[group] = info
                    expect.append((i, group, info))
        assert notified[n_note:] == expect
