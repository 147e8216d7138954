"""Schemas of the exports the pipeline reads (see docs/pipeline.md).

One source of truth: field name, type, required. Spark and Arrow schemas are
derived from it so the generator, the readers and the pandas peer agree.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Field:
    name: str
    kind: str  # "str" | "int" | "bool" | "int_list"
    required: bool = True


ACKS = (
    Field("msg_id", "str"),
    Field("group", "str"),
    Field("broker_id", "int"),
    Field("topic", "str"),
    Field("queue_offset", "int"),
    Field("phy_offset", "int"),
    Field("epoch", "int"),
    Field("ack_ts_ms", "int"),
)

# Fields of events.jsonl a reader does not insist on: null (no master), or absent from files
# written before the field existed.
_EVENTS_OPTIONAL = frozenset({"master_broker_id", "reason", "unclean"})


def _events_schema() -> tuple[Field, ...]:
    """events.jsonl as the controller writes it: names and types from its one record type
    (controller/state/history.py HistoryRecord), so the two cannot drift apart."""
    import msgspec
    from autoswitch.controller.state.history import HistoryRecord

    kinds = {int: "int", str: "str", bool: "bool", int | None: "int", tuple[int, ...]: "int_list"}
    return tuple(Field(f.name, kinds[f.type], required=f.required and f.name not in _EVENTS_OPTIONAL)
                 for f in msgspec.structs.fields(HistoryRecord))


EVENTS = _events_schema()

LOG_INDEX = (
    Field("group", "str"),
    Field("broker_id", "int"),
    Field("phy_offset", "int"),
    Field("size", "int"),
    Field("crc", "int"),
    Field("topic", "str"),
    Field("queue_offset", "int"),
    Field("msg_id", "str"),
    Field("born_ts_ms", "int"),
    Field("epoch", "int"),
)

EPOCHS = (
    Field("group", "str"),
    Field("broker_id", "int"),
    Field("epoch", "int"),
    Field("start_offset", "int"),
)

# min_offset is our optional extension: the first retained offset of the replica, so that
# retention is not mistaken for loss. Absent means 0.
REPLICA = (
    Field("group", "str"),
    Field("broker_id", "int"),
    Field("max_offset", "int"),
    Field("confirm_offset", "int"),
    Field("min_offset", "int", required=False),
)

# Consumer-group commit records of one replica's log (the __consumer_offsets topic), in log order.
OFFSETS = (
    Field("group", "str"),
    Field("broker_id", "int"),
    Field("consumer_group", "str"),
    Field("topic", "str"),
    Field("committed", "int"),
    Field("phy_offset", "int"),
    Field("epoch", "int"),
)

# What a consumer was told: every acknowledged commit (`autoswitch consume --commit-log`).
COMMITS = (
    Field("group", "str"),
    Field("consumer_group", "str"),
    Field("topic", "str"),
    Field("committed", "int"),
    Field("ack_ts_ms", "int", required=False),
    Field("broker_id", "int", required=False),
    Field("epoch", "int", required=False),
)

KINDS = {"acks": ACKS, "events": EVENTS, "index": LOG_INDEX, "epochs": EPOCHS, "replica": REPLICA,
         "offsets": OFFSETS, "commits": COMMITS}


def spark_schema(fields: tuple[Field, ...]):
    from pyspark.sql import types as T

    m = {"str": T.StringType(), "int": T.LongType(), "bool": T.BooleanType(),
         "int_list": T.ArrayType(T.LongType())}
    return T.StructType([T.StructField(f.name, m[f.kind], True) for f in fields])


def arrow_schema(fields: tuple[Field, ...]):
    import pyarrow as pa

    m = {"str": pa.string(), "int": pa.int64(), "bool": pa.bool_(), "int_list": pa.list_(pa.int64())}
    return pa.schema([pa.field(f.name, m[f.kind], nullable=not f.required) for f in fields])
