"""StoreConfig: every knob of the message store, with its default and why."""

from __future__ import annotations

from dataclasses import dataclass

from autoswitch.broker.storage import record as rec

from autoswitch.base.errors import ConfigError

MiB = 1024 * 1024


@dataclass(frozen=True)
class StoreConfig:
    # Size of one commit-log segment file. Recovery verifies the last segment up to the
    # synced point, so this bounds recovery time; it is also the retention granularity.
    # RocketMQ uses 1 GiB (mmap, Java); 64 MiB keeps Python recovery well under a second.
    # Every replica of a group must use the same value (padding positions are replicated).
    segment_bytes: int = 64 * MiB
    # "async": append returns after write(); the broker calls flush() every
    # flush_interval_ms. "sync": append fsyncs the data before returning.
    flush_mode: str = "async"
    flush_interval_ms: int = 500  # RocketMQ flushIntervalCommitLog
    # Largest message body (RocketMQ maxMessageSize default 4 MiB).
    max_message_bytes: int = 4 * MiB
    # Largest append_messages / append_raw batch.
    max_batch_bytes: int = 32 * MiB
    # Entries per consume-index file (RocketMQ: 300000 per ConsumeQueue file).
    index_entries_per_file: int = 300_000
    # Retention the broker applies with apply_retention(): keep at least this many bytes
    # (None: no size rule) / delete segments older than this (None: no age rule).
    retention_bytes: int | None = None
    retention_hours: float | None = 72.0  # RocketMQ fileReservedTime
    # CRC-check records on read_raw / read_messages / scan (reads never trust disk blindly).
    verify_reads: bool = True
    # Most topics (consume indexes) one store holds.
    max_topics: int = 10_000
    # Most messages one read_messages call returns.
    max_read_messages: int = 65_536
    # A cut (truncation) copies the bytes it drops to quarantine/ first, up to this many bytes per
    # cut (broker/storage/quarantine.py); a larger cut is logged critical and not copied.
    quarantine_max_bytes: int = 256 * MiB

    @property
    def max_record_bytes(self) -> int:
        return rec.HEADER_SIZE + rec.MAX_TOPIC_BYTES + rec.MAX_MSG_ID_BYTES + self.max_message_bytes

    def __post_init__(self) -> None:
        if self.flush_mode not in ("sync", "async"):
            raise ConfigError(f"flush_mode must be 'sync' or 'async', got {self.flush_mode!r}")
        if self.flush_interval_ms <= 0:
            raise ConfigError("flush_interval_ms must be > 0")
        if not (1 <= self.max_message_bytes <= rec.HARD_MAX_RECORD // 2):
            raise ConfigError(f"max_message_bytes must be 1..{rec.HARD_MAX_RECORD // 2}")
        # any record plus a padding header must fit in one segment
        if self.segment_bytes < self.max_record_bytes + rec.HEADER_SIZE:
            raise ConfigError(
                f"segment_bytes={self.segment_bytes} must be >= max record size + padding header "
                f"({self.max_record_bytes + rec.HEADER_SIZE})"
            )
        if self.segment_bytes >= 1 << 40:
            raise ConfigError("segment_bytes must be < 1 TiB")
        if self.max_batch_bytes < self.max_record_bytes:
            raise ConfigError("max_batch_bytes must hold at least one record")
        if not (1 <= self.index_entries_per_file <= 50_000_000):
            raise ConfigError("index_entries_per_file must be 1..50000000")
        if self.retention_bytes is not None and self.retention_bytes < 0:
            raise ConfigError("retention_bytes must be >= 0 or None")
        if self.retention_hours is not None and self.retention_hours < 0:
            raise ConfigError("retention_hours must be >= 0 or None")
        if self.max_topics < 1 or self.max_read_messages < 1:
            raise ConfigError("max_topics and max_read_messages must be >= 1")
