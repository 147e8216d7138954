"""The SQL store (PostgreSQL, MySQL/MariaDB, SQLite) through SQLAlchemy Core: one engine, the same
statements on every database; SQLAlchemy renders the dialect differences, and the one expression it
has no portable form for, the database server's clock in milliseconds, is a compiled construct below.

Tables (created when missing): ``distribute_lock`` (the leader lock, controller/store/lock.py),
``autoswitch_log`` (the replicated entries, one row each, with a CRC) and ``autoswitch_snapshot``
(the state machine's snapshot the log was trimmed behind). Every method is one or a few short
transactions and blocks: the node runs them on its own worker threads."""

from __future__ import annotations

import math
import zlib

from sqlalchemy import (
    BigInteger,
    Column,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    and_,
    create_engine,
    delete,
    event,
    func,
    insert,
    select,
    update,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import FunctionElement

from autoswitch.base.errors import ConfigError

from .base import LogEntry, Snapshot
from .config import StoreBackendConfig
from .errors import Fenced, StoreCorrupt, StoreUnavailable
from .lock import LockOutcome, LockRow, Step, decide


class db_now_ms(FunctionElement):
    """The database server's clock, milliseconds since the epoch: lock expiry is judged by it."""

    type = BigInteger()
    inherit_cache = True


@compiles(db_now_ms, "postgresql")
def _pg_now(_el, _compiler, **_kw) -> str:
    return "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"  # now() is the transaction's start


@compiles(db_now_ms, "sqlite")
def _sqlite_now(_el, _compiler, **_kw) -> str:
    return "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"


@compiles(db_now_ms, "mysql")
@compiles(db_now_ms, "mariadb")
def _mysql_now(_el, _compiler, **_kw) -> str:
    return "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"


metadata = MetaData()


def _key() -> tuple[Column, Column]:
    """Every table is scoped by (data_center, lock_name): clusters may share a database."""
    return Column("data_center", String(128), primary_key=True), Column("lock_name", String(128), primary_key=True)


lock_table = Table(
    "distribute_lock", metadata, *_key(),
    Column("owner", String(128), nullable=False),
    Column("duration", BigInteger, nullable=False),
    Column("term", BigInteger, nullable=False),
    Column("term_duration", BigInteger, nullable=False),
    Column("gmt_create", BigInteger, nullable=False),
    Column("gmt_modified", BigInteger, nullable=False),
)
log_table = Table(
    "autoswitch_log", metadata, *_key(),
    Column("idx", BigInteger, primary_key=True, autoincrement=False),
    Column("term", BigInteger, nullable=False),
    Column("crc", Integer, nullable=False),
    Column("data", LargeBinary(64 << 20), nullable=False),
)
snapshot_table = Table(
    "autoswitch_snapshot", metadata, *_key(),
    Column("idx", BigInteger, nullable=False),
    Column("term", BigInteger, nullable=False),
    Column("crc", Integer, nullable=False),
    Column("data", LargeBinary(1 << 30), nullable=False),
)


def _crc(data: bytes) -> int:
    # signed 32-bit, so every database's INTEGER holds it
    c = zlib.crc32(data)
    return c - (1 << 32) if c >= 1 << 31 else c


def _engine(cfg: StoreBackendConfig) -> Engine:
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        return _make_engine(cfg)
    except (ArgumentError, NoSuchModuleError, ImportError) as e:
        raise ConfigError(f"[store] url is not a database URL this controller can use: {e}", key="url") from None


def _make_engine(cfg: StoreBackendConfig) -> Engine:
    url = cfg.resolved_url()
    t_s = cfg.statement_timeout_ms / 1000
    if url.startswith("sqlite"):
        eng = create_engine(url, connect_args={"timeout": t_s})

        @event.listens_for(eng, "connect")
        def _sqlite_pragmas(dbapi_conn, _rec) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")      # readers never wait for the writer
            cur.execute("PRAGMA synchronous=FULL")      # a committed log entry survives power loss
            cur.close()

        return eng
    if url.startswith("postgresql"):
        ms = cfg.statement_timeout_ms
        # idle_in_transaction_session_timeout: a leader paused inside a write (after its fence,
        # before COMMIT) holds the lock row; the server ends that transaction, nothing commits late
        return create_engine(url, pool_pre_ping=True, pool_size=4, pool_timeout=t_s,
                             connect_args={"connect_timeout": max(1, int(t_s)),
                                           "options": f"-c statement_timeout={ms} -c lock_timeout={ms} "
                                                      f"-c idle_in_transaction_session_timeout={cfg.idle_in_transaction_ms}"})
    if url.startswith(("mysql", "mariadb")):
        # MariaDB's bounds: a statement (max_statement_time, seconds), a row-lock wait
        # (innodb_lock_wait_timeout, whole seconds) and an idle transaction
        # (idle_transaction_timeout, whole seconds: the same paused-leader case)
        init = (f"SET SESSION max_statement_time={t_s}, innodb_lock_wait_timeout={max(1, math.ceil(t_s))}, "
                f"idle_transaction_timeout={cfg.idle_in_transaction_ms // 1000}")
        return create_engine(url, pool_pre_ping=True, pool_size=4, pool_timeout=t_s,
                             connect_args={"connect_timeout": max(1, int(t_s)), "read_timeout": max(1, int(t_s)),
                                           "write_timeout": max(1, int(t_s)), "init_command": init})
    return create_engine(url, pool_pre_ping=True)


class SqlStore:
    """One controller cluster's lock, log and snapshot in a SQL database."""

    # no bound of the database's own: the [store] keys decide
    max_batch_entries = 10_000
    max_batch_bytes = 64 << 20

    def __init__(self, cfg: StoreBackendConfig) -> None:
        self.cfg = cfg
        self.engine = _engine(cfg)
        self._where_lock = and_(lock_table.c.data_center == cfg.data_center, lock_table.c.lock_name == cfg.lock_name)
        self._where_log = and_(log_table.c.data_center == cfg.data_center, log_table.c.lock_name == cfg.lock_name)
        self._where_snap = and_(snapshot_table.c.data_center == cfg.data_center,
                                snapshot_table.c.lock_name == cfg.lock_name)

    @property
    def kind(self) -> str:
        return self.engine.dialect.name

    def close(self) -> None:
        self.engine.dispose()

    def _run(self, fn, *args):
        """One transaction; the driver's errors become StoreUnavailable (Fenced and StoreCorrupt pass)."""
        try:
            with self.engine.begin() as conn:
                return fn(conn, *args)
        except sa_exc.IntegrityError as e:
            raise Fenced(f"conflicting write: {e.orig}") from None
        except sa_exc.SQLAlchemyError as e:
            raise StoreUnavailable(f"{type(e).__name__}: {str(e).splitlines()[0][:300]}") from None

    def set_wakeup(self, fn) -> None:
        """Nothing here tells us when the lock changes: the node looks every heartbeat_ms."""

    def create_schema(self) -> None:
        try:
            metadata.create_all(self.engine, checkfirst=True)
        except sa_exc.SQLAlchemyError:
            # another controller created the tables at the same moment: a second look must find them
            try:
                metadata.create_all(self.engine, checkfirst=True)
            except sa_exc.SQLAlchemyError as e:
                raise StoreUnavailable(f"cannot create the tables: {str(e).splitlines()[0][:300]}") from None

    # ---------------------------------------------------------------- the lock

    def _read_lock(self, conn: Connection) -> tuple[LockRow | None, int]:
        t = lock_table.c
        row = conn.execute(select(t.owner, t.duration, t.term, t.term_duration, t.gmt_modified)
                           .where(self._where_lock)).first()
        now = int(conn.execute(select(db_now_ms())).scalar_one())
        return (LockRow(row.owner, int(row.duration), int(row.term), int(row.term_duration), int(row.gmt_modified))
                if row is not None else None), now

    def read_lock(self) -> tuple[LockRow | None, int]:
        return self._run(self._read_lock)

    def _not_expired(self):
        return lock_table.c.gmt_modified + lock_table.c.duration >= db_now_ms()

    def lock_round(self, me: str, lease_ms: int, observer: bool, sent_at_ms: int) -> LockOutcome:
        """Read the lock, take the step ``lock.decide`` says, read it again (three short
        transactions: each conditional write re-checks what it relies on)."""
        row, now = self.read_lock()
        step = decide(row, me, now, observer)
        t = lock_table.c
        if step is Step.COMPETE_INSERT:
            try:
                self._run(lambda c: c.execute(insert(lock_table).values(
                    data_center=self.cfg.data_center, lock_name=self.cfg.lock_name, owner=me, duration=lease_ms,
                    term=1, term_duration=0, gmt_create=db_now_ms(), gmt_modified=db_now_ms())))
            except Fenced:
                pass        # another controller inserted first
        elif step is Step.RENEW and row is not None:
            n = self._run(lambda c: c.execute(update(lock_table).where(
                self._where_lock, t.owner == me, t.term == row.term, t.term_duration == row.term_duration,
                self._not_expired()).values(term_duration=t.term_duration + 1, gmt_modified=db_now_ms())).rowcount)
            if n == 0:      # force refresh: our own earlier renewal may have landed after a timeout
                self._run(lambda c: c.execute(update(lock_table).where(
                    self._where_lock, t.owner == me, t.term == row.term, self._not_expired())
                    .values(term_duration=t.term_duration + 1, gmt_modified=db_now_ms())))
        elif step is Step.COMPETE_UPDATE and row is not None:
            self._run(lambda c: c.execute(update(lock_table).where(
                self._where_lock, t.term == row.term, t.term_duration == row.term_duration,
                t.gmt_modified + t.duration < db_now_ms()).values(
                owner=me, term=t.term + 1, term_duration=0, duration=lease_ms, gmt_modified=db_now_ms())))
        if step is Step.FOLLOW:
            return LockOutcome(row, False, sent_at_ms)
        after, now = self.read_lock()
        holds = after is not None and after.owner == me and not after.expired(now) and (
            step is not Step.COMPETE_UPDATE or row is None or after.term > row.term)
        return LockOutcome(after, holds, sent_at_ms)

    def _fence(self, conn: Connection, me: str, term: int) -> None:
        """Inside a writing transaction, as its **last** statement: re-check that ``me`` holds the
        lock in ``term`` by the database's clock now. The no-op update takes the row's write lock
        (SQLite: the database's), so a competitor's takeover is ordered entirely before or after
        this transaction. Last, not first: a leader paused after a first-statement fence kept the
        transaction and the row lock open, nobody could take over, and its write committed
        whenever it resumed. Now a pause before the fence finds the lock expired, and a pause
        after it (before COMMIT) is ended by the server's idle-in-transaction timeout."""
        t = lock_table.c
        n = conn.execute(update(lock_table).where(self._where_lock, t.owner == me, t.term == term,
                                                  self._not_expired()).values(owner=t.owner)).rowcount
        if n != 1:
            raise Fenced(f"{me} no longer holds the controller lock in term {term}", term=term)

    # ---------------------------------------------------------------- the log

    def append(self, me: str, term: int, first_index: int, datas: list[bytes]) -> None:
        """Commit entries ``first_index..`` atomically, fenced by the lock; raises Fenced (nothing
        written) or StoreUnavailable (outcome unknown)."""
        self._run(self._append_tx, me, term, first_index, datas)

    def _append_tx(self, conn: Connection, me: str, term: int, first_index: int, datas: list[bytes]) -> None:
        conn.execute(insert(log_table), [
            {"data_center": self.cfg.data_center, "lock_name": self.cfg.lock_name, "idx": first_index + i,
             "term": term, "crc": _crc(d), "data": d} for i, d in enumerate(datas)])
        self._fence(conn, me, term)

    def verify(self, me: str, term: int) -> int:
        """Fenced read barrier: raises Fenced unless ``me`` still holds the lock in ``term``;
        returns the log's last index."""
        def tx(conn: Connection) -> int:
            row, now = self._read_lock(conn)
            if row is None or row.owner != me or row.term != term or row.expired(now):
                raise Fenced(f"{me} no longer holds the controller lock in term {term}", term=term)
            return self._last_index(conn)
        return self._run(tx)

    def _last_index(self, conn: Connection) -> int:
        last = conn.execute(select(func.max(log_table.c.idx)).where(self._where_log)).scalar()
        if last is not None:
            return int(last)
        snap = conn.execute(select(snapshot_table.c.idx).where(self._where_snap)).scalar()
        return int(snap) if snap is not None else 0

    def last_index(self) -> int:
        return self._run(self._last_index)

    def read(self, from_index: int, limit: int) -> tuple[int, list[LogEntry]]:
        """(the snapshot's index, 0 if none; entries ``from_index..`` in order, at most ``limit``),
        CRC-checked, from one transaction. When the log was trimmed behind the snapshot the entries
        start later than asked, or there are none although the snapshot is newer than asked."""
        t = log_table.c

        def tx(conn: Connection):
            snap = conn.execute(select(snapshot_table.c.idx).where(self._where_snap)).scalar()
            rows = conn.execute(select(t.idx, t.term, t.crc, t.data).where(
                self._where_log, t.idx >= from_index).order_by(t.idx).limit(limit)).all()
            return int(snap) if snap is not None else 0, rows
        snap, rows = self._run(tx)
        out: list[LogEntry] = []
        for r in rows:
            data = bytes(r.data)
            if _crc(data) != r.crc:
                raise StoreCorrupt(f"log entry {r.idx} fails its CRC", index=int(r.idx))
            if out and int(r.idx) != out[-1].index + 1:
                raise StoreCorrupt(f"log has a hole before entry {r.idx}", index=int(r.idx))
            out.append(LogEntry(int(r.idx), int(r.term), data))
        return snap, out

    # ---------------------------------------------------------------- snapshots

    def load_snapshot(self) -> Snapshot | None:
        t = snapshot_table.c
        r = self._run(lambda c: c.execute(select(t.idx, t.term, t.crc, t.data).where(self._where_snap)).first())
        if r is None:
            return None
        data = bytes(r.data)
        if _crc(data) != r.crc:
            raise StoreCorrupt(f"snapshot at {r.idx} fails its CRC", index=int(r.idx))
        return Snapshot(int(r.idx), int(r.term), data)

    def save_snapshot(self, me: str, term: int, index: int, data: bytes) -> None:
        """Fenced: replace the snapshot with one at ``index`` and trim the log behind it."""
        def tx(conn: Connection) -> None:
            conn.execute(delete(snapshot_table).where(self._where_snap))
            conn.execute(insert(snapshot_table).values(data_center=self.cfg.data_center, lock_name=self.cfg.lock_name,
                                                       idx=index, term=term, crc=_crc(data), data=data))
            conn.execute(delete(log_table).where(self._where_log, log_table.c.idx <= index))
            self._fence(conn, me, term)
        self._run(tx)
