"""Per-topic settings as records of the replicated commit log (docs/broker.md, "Topics"): a
create, an update or a delete is one record in the internal topic ``__topics``, appended and
acknowledged like a produced message, so a slave holds every setting its master acknowledged and
a failover keeps them (RocketMQ keeps topic configs in a file beside the log, which is how a
master switch could lose them; Kafka keeps them in its metadata log).

This module is the pure part: the record encoding and the table the master builds from its log.
Unlike consumer offsets, a setting applies from the moment its record is in the master's log:
enforcing a limit a failover may undo costs nothing (the new master enforces what it holds).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import orjson
from autoswitch.broker.record_body import load_doc

from autoswitch.base.limits import MAX_NAME_LEN, MAX_TOPIC_BYTES
from autoswitch.base.write_errors import BadRequest

TOPICS_TOPIC = "__topics"
MAX_TOPICS = 100_000             # configured topics a master keeps (a create beyond is refused)
MIN_RETENTION_HOURS = 0.001      # 3.6 s: shorter would expire messages before a consumer could read them
MAX_RETENTION_HOURS = 24 * 365 * 100


@dataclass(frozen=True)
class TopicSettings:
    max_message_bytes: int | None = None    # None: the broker's max_message_bytes
    created_by: str = ""
    updated_ms: int = 0
    retention_hours: float | None = None    # None: the log's retention only


def check_topic(topic: str) -> None:
    if not topic or len(topic.encode("utf-8", "surrogatepass")) > MAX_TOPIC_BYTES or topic.startswith("__"):
        raise BadRequest(f"topic must be 1..{MAX_TOPIC_BYTES} bytes and not start with '__'")


# A new topic's name (docs/broker.md "Topic names"): RocketMQ's characters (TopicValidator: letters,
# digits, '_', '-', '%', '|') and Kafka's '.', at most Kafka's 249 characters, never '.' or '..'.
# Names written by an older release stay usable whatever they hold: only a topic being created is
# checked (a produce that creates it, topic-create of a topic this master does not know).
NEW_TOPIC_MAX_CHARS = 249
_NEW_TOPIC_CHARS = re.compile(r"[A-Za-z0-9._%|-]+")


def new_topic_problem(topic: str) -> str | None:
    """Why ``topic`` may not be created (None: it may)."""
    if not topic:
        return "a topic name may not be empty"
    if len(topic) > NEW_TOPIC_MAX_CHARS:
        return f"a topic name has at most {NEW_TOPIC_MAX_CHARS} characters ({len(topic)} given)"
    if topic in (".", ".."):
        return f"{topic!r} is not a topic name"
    if topic.startswith("__"):
        return "topic names starting with '__' are the broker's own"
    if _NEW_TOPIC_CHARS.fullmatch(topic) is None:
        bad = sorted({c for c in topic if _NEW_TOPIC_CHARS.fullmatch(c) is None})
        return (f"a topic name holds letters, digits and . _ - % | only (as RocketMQ and Kafka); "
                f"{topic!r} has {''.join(bad)!r}")
    return None


def encode_settings(topic: str, max_message_bytes: int | None, by: str, now_ms: int,
                    retention_hours: float | None = None) -> bytes:
    check_topic(topic)
    if max_message_bytes is not None and max_message_bytes < 1:
        raise BadRequest("max_message_bytes must be >= 1")
    if retention_hours is not None and not MIN_RETENTION_HOURS <= retention_hours <= MAX_RETENTION_HOURS:
        raise BadRequest(f"retention_hours must be in [{MIN_RETENTION_HOURS}, {MAX_RETENTION_HOURS}]")
    doc: dict = {"t": topic, "m": max_message_bytes, "ts": now_ms}
    if retention_hours is not None:
        doc["r"] = retention_hours
    if by:
        doc["u"] = by[:MAX_NAME_LEN]
    return orjson.dumps(doc)


def encode_delete(topic: str, by: str, now_ms: int) -> bytes:
    check_topic(topic)
    doc: dict = {"t": topic, "d": 1, "ts": now_ms}
    if by:
        doc["u"] = by[:MAX_NAME_LEN]
    return orjson.dumps(doc)


def decode(body: bytes) -> tuple[str, TopicSettings | None] | None:
    """(topic, its settings; None for a delete), or None for a record that is not well-formed."""
    d = load_doc(body)
    if d is None or not isinstance(d.get("t"), str) or not d["t"]:
        return None
    by = d.get("u", "")
    ts = d.get("ts", 0)
    if not isinstance(by, str) or type(ts) is not int:
        return None
    if d.get("d") == 1:
        return d["t"], None
    m = d.get("m")
    if m is not None and (type(m) is not int or m < 1):
        return None
    r = d.get("r")
    if r is not None and (type(r) not in (int, float) or not MIN_RETENTION_HOURS <= r <= MAX_RETENTION_HOURS):
        return None
    return d["t"], TopicSettings(m, by, ts, float(r) if r is not None else None)


@dataclass
class TopicTable:
    """Topic -> settings, in log order (the last record of a topic wins); ``deleted``: topics
    whose last record is a delete."""

    settings: dict[str, TopicSettings] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)

    def apply(self, topic: str, s: TopicSettings | None) -> None:
        if s is None:
            self.settings.pop(topic, None)
            self.deleted.add(topic)
        else:
            self.settings[topic] = s
            self.deleted.discard(topic)

    def size_limit(self, topic: str, broker_limit: int) -> int:
        s = self.settings.get(topic)
        if s is None or s.max_message_bytes is None:
            return broker_limit
        return min(s.max_message_bytes, broker_limit)

    def refusal(self, topic: str, auto_create: bool, in_log: bool) -> str | None:
        """Why a write to ``topic`` is refused (None: allowed). ``in_log``: the log already holds
        messages of it (a topic from before ``auto_create_topics`` was turned off stays usable)."""
        if topic in self.deleted:
            return f"topic {topic!r} was deleted (admin topic-create makes it writable again)"
        if topic not in self.settings and not in_log:
            if not auto_create:
                return f"topic {topic!r} does not exist and this broker does not create topics (admin topic-create)"
            problem = new_topic_problem(topic)
            if problem is not None:
                return f"topic {topic!r} cannot be created: {problem}"
        return None


def retention_cutoff_ms(s: TopicSettings | None, now_ms: int) -> int | None:
    """Messages born before this are past the topic's own retention; None: it has none."""
    if s is None or s.retention_hours is None:
        return None
    return now_ms - int(s.retention_hours * 3_600_000)
