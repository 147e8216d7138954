"""Find export files and read them into Spark DataFrames with fixed schemas.

A PATH is a file or a directory. Files ending in .parquet are Parquet; .jsonl,
.ndjson and .json are JSON lines. A --logs directory holds three kinds of rows,
told apart by a sub-directory (index/, epochs/, replica/) or a name infix
(`b1.index.jsonl`, `b1.epochs.jsonl`, `b1.replica.jsonl`), which is what
`autoswitch pipeline export-log` writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from autoswitch.pipeline import schemas
from autoswitch.pipeline.errors import InputNotFound, MalformedInput

from autoswitch.base.log import get_logger

log = get_logger("pipeline")

JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")
PARQUET_SUFFIXES = (".parquet",)
LOG_KINDS = ("index", "epochs", "replica", "offsets")
MAX_INPUT_FILES = 100_000  # a limit on everything: a directory walk is bounded too
_CORRUPT = "_corrupt_record"


@dataclass
class Sources:
    """Files of one kind, split by format."""

    kind: str
    json: list[str] = field(default_factory=list)
    parquet: list[str] = field(default_factory=list)

    def empty(self) -> bool:
        return not self.json and not self.parquet


def _fmt(p: Path) -> str | None:
    name = p.name.lower()
    if name.startswith((".", "_")):
        return None  # _SUCCESS, .crc files of Spark/Hadoop writers
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    if name.endswith(JSON_SUFFIXES):
        return "json"
    return None


def _walk(root: Path) -> list[Path]:
    out: list[Path] = []
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out.append(p)
            if len(out) > MAX_INPUT_FILES:
                raise MalformedInput(f"more than {MAX_INPUT_FILES} files under {root}", path=str(root))
    return out


def _add(src: Sources, p: Path) -> None:
    f = _fmt(p)
    if f == "json":
        src.json.append(str(p))
    elif f == "parquet":
        src.parquet.append(str(p))


def find_sources(path: str | Path, kind: str) -> Sources:
    """Files of `kind` (acks, events) at `path`."""
    p = Path(path)
    if not p.exists():
        raise InputNotFound(f"{kind} input {p} does not exist", path=str(p))
    src = Sources(kind)
    for f in [p] if p.is_file() else _walk(p):
        _add(src, f)
    if src.empty():
        raise InputNotFound(f"no .parquet/.jsonl files for {kind} at {p}", path=str(p))
    return src


def find_log_sources(path: str | Path) -> dict[str, Sources]:
    """The three kinds of per-replica rows under a --logs directory."""
    p = Path(path)
    if not p.is_dir():
        raise InputNotFound(f"--logs {p} is not a directory", path=str(p))
    out = {k: Sources(k) for k in LOG_KINDS}
    for f in _walk(p):
        rel = f.relative_to(p).parts
        kind = None
        if len(rel) > 1 and rel[0] in LOG_KINDS:
            kind = rel[0]
        else:
            for k in LOG_KINDS:
                if f".{k}." in f.name:
                    kind = k
        if kind is not None:
            _add(out[kind], f)
    for k in ("index", "replica"):
        if out[k].empty():
            raise InputNotFound(f"no {k} files under --logs {p} (expected {k}/ or *.{k}.jsonl)", path=str(p))
    return out


MAX_SMALL_ROWS = 5_000_000   # replica, epoch and event tables are read on the driver


def _check_row(row, fields, where: str) -> dict:
    if not isinstance(row, dict):
        raise MalformedInput(f"{where}: not a JSON object", where=where)
    out: dict[str, object] = {}
    for f in fields:
        v = row.get(f.name)
        if v is None:
            if f.required:
                raise MalformedInput(f"{where}: missing required field {f.name!r}", where=where)
            out[f.name] = None
            continue
        ok = {"str": lambda x: isinstance(x, str),
              "int": lambda x: isinstance(x, int) and not isinstance(x, bool),
              "bool": lambda x: isinstance(x, bool),
              "int_list": lambda x: isinstance(x, list) and all(
                  isinstance(i, int) and not isinstance(i, bool) for i in x)}[f.kind](v)
        if not ok:
            raise MalformedInput(f"{where}: field {f.name!r} should be {f.kind}, got {v!r:.80}", where=where)
        out[f.name] = v
    return out


def read_rows(src: Sources) -> list[dict]:
    """A small table (replica offsets, EpochFiles, controller events) as validated dicts, on the
    driver: no Spark job, and the first bad row is named by file and line."""
    import json

    fields = schemas.KINDS[src.kind]
    rows: list[dict] = []
    for path in src.json:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except ValueError as e:
                    log.error("malformed_input", kind=src.kind, where=f"{path}:{n}", error=str(e))
                    raise MalformedInput(f"{path}:{n}: not JSON ({e})", where=f"{path}:{n}") from e
                rows.append(_check_row(obj, fields, f"{path}:{n}"))
                if len(rows) > MAX_SMALL_ROWS:
                    raise MalformedInput(f"more than {MAX_SMALL_ROWS} {src.kind} rows", kind=src.kind)
    if src.parquet:
        import pyarrow.parquet as pq

        for path in src.parquet:
            for n, obj in enumerate(pq.read_table(path).to_pylist(), start=1):
                rows.append(_check_row(obj, fields, f"{path}#row{n}"))
                if len(rows) > MAX_SMALL_ROWS:
                    raise MalformedInput(f"more than {MAX_SMALL_ROWS} {src.kind} rows", kind=src.kind)
    return rows


def read(spark, src: Sources, validate_parquet: bool = False):
    """One DataFrame with the kind's schema; malformed JSON rows raise MalformedInput.

    JSON is checked row by row (one extra scan; exports in JSON are the small ones).
    Parquet is read with the same schema; a type mismatch fails the job and is
    reported by the caller as a typed error.
    """
    fields = schemas.KINDS[src.kind]
    schema = schemas.spark_schema(fields)
    frames = []
    if src.json:
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        js = T.StructType(schema.fields + [T.StructField(_CORRUPT, T.StringType(), True)])
        df = (spark.read.schema(js).option("mode", "PERMISSIVE")
              .option("columnNameOfCorruptRecord", _CORRUPT).json(src.json))
        bad = F.col(_CORRUPT).isNotNull()
        for f in fields:
            if f.required:
                bad = bad | F.col(f.name).isNull()
        # No cache() here: Spark would hand the cached rows to a later read of a rewritten file.
        # The filter names every column, so Spark accepts it on the raw scan.
        sample = df.filter(bad).limit(3).collect()
        if sample:
            rows = [r[_CORRUPT] or str(r.asDict()) for r in sample]
            log.error("malformed_input", kind=src.kind, files=len(src.json), sample=rows)
            raise MalformedInput(f"malformed {src.kind} rows (bad JSON, wrong type or missing field)",
                                 kind=src.kind, sample=rows)
        frames.append(df.drop(_CORRUPT))
    if src.parquet:
        frames.append(_read_parquet(spark, src.parquet, schema, fields, validate_parquet))
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def _read_parquet(spark, paths: list[str], schema, fields, validate: bool):
    from pyspark.sql import functions as F

    # Optional fields may be missing from a file's footer: read what exists, add nulls for the rest.
    df = spark.read.parquet(*paths)
    have = set(df.columns)
    missing_required = [f.name for f in fields if f.required and f.name not in have]
    if missing_required:
        raise MalformedInput(f"parquet input lacks required columns {missing_required}",
                             files=paths[:3], missing=missing_required)
    cols = []
    for f, sf in zip(fields, schema.fields, strict=True):
        c = F.col(f.name) if f.name in have else F.lit(None)
        cols.append(c.cast(sf.dataType).alias(f.name))
    df = df.select(*cols)
    if validate:
        bad = None
        for f in fields:
            if f.required:
                c = F.col(f.name).isNull()
                bad = c if bad is None else bad | c
        sample = df.filter(bad).limit(3).collect()
        if sample:
            raise MalformedInput("parquet rows with null required fields",
                                 sample=[str(r.asDict()) for r in sample])
    return df
