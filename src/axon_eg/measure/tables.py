"""Polars result tables, stored as Parquet part files under a cache directory.

Location: ``cache_dir`` argument, else ``$AXON_EG_CACHE``, else ``~/.cache/axon_eg``; table ``T`` lives in
``<cache>/tables/T/part-*.parquet``. Appends are atomic: each call writes a new part file under a
temporary name in the same directory and ``os.replace``s it to a unique final name, so concurrent
writers never clobber each other and a reader never sees a half-written part. ``read`` scans all parts
(parts written before a column was added read it as null).

Tables with a schema (``SCHEMAS``) are validated on append: an unknown column raises, naming it; a
missing required column (``REQUIRED``) raises; other missing columns are filled with nulls. Lists and
dicts bound for Utf8 columns (the JSON columns) are JSON-encoded.

Schema of ``measurements`` (one row per observation of a candidate, as written by the worker):

==================  =========  ======================================================================
column              dtype      meaning
==================  =========  ======================================================================
id                  Utf8       candidate id (unique within its bundle); required
status              Utf8       ok / syntax_error / structure_error / compile_error / runtime_error /
                               wrong_result / timeout / crashed; required
stage               Utf8       where it stopped: enumerate, emit (phase 1), syntax, structure, startup, compile, run,
                               correctness, timing, reference, harness, ray, done
error               Utf8       error text (None when ok)
median_us .. min_us Float64    latency statistics in microseconds (None on CPU)
runs, trials        Int64      timed runs, correctness trials
max_abs_err/_rel_   Float64    max absolute / relative error vs the float64 reference
device              Utf8       e.g. ``cuda (NVIDIA H200)`` or ``cpu``
*_version           Utf8       torch, triton and python versions
timestamp           Utf8       ISO 8601, UTC
elapsed_s           Float64    wall-clock seconds for the whole candidate
source, entry       Utf8       source file in the bundle and entry point
kind                Utf8       candidate / baseline (baselines: ids ``torch_eager``, ``torch_compile``)
cache_key           Utf8       key of the optimization run (program, hardware, target) it belongs to
program             Utf8       program name
hw                  Utf8       hardware model name, e.g. ``H200``
target              Utf8       code generation target, e.g. ``triton``
predicted_us        Float64    the cost model's latency prediction
==================  =========  ======================================================================

Schema of ``candidates`` (static facts, one row per emitted candidate; joins ``measurements`` on
``cache_key`` + ``id``):

==================  =========  ======================================================================
column              dtype      meaning
==================  =========  ======================================================================
cache_key           Utf8       key of the optimization run; required
program             Utf8       program name
program_hash        Utf8       hash of the input program
target, hw          Utf8       code generation target and hardware model
id                  Utf8       candidate id (as in the bundle manifest); required
kind                Utf8       candidate / baseline
variant             Utf8       hash of the variant program (after rewrites)
rank                Int64      rank by predicted latency (0 = predicted fastest)
plan                Utf8       fusion plan, human readable
groups              Int64      number of fusion groups (kernel launches)
tilings             Utf8       JSON: tile sizes per group
isa                 Utf8       JSON: instruction choices per group (e.g. tensor cores)
lowering            Utf8       backends used, e.g. ``triton:2 torch:1``
rules               Utf8       JSON list of the rewrite rule names that fired
predicted_us        Float64    the cost model's latency prediction
source              Utf8       path of the emitted source file
timestamp           Utf8       ISO 8601, UTC
==================  =========  ======================================================================
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import polars as pl

SCHEMA: dict[str, pl.DataType] = {
    "id": pl.Utf8(),
    "status": pl.Utf8(),
    "stage": pl.Utf8(),
    "error": pl.Utf8(),
    "median_us": pl.Float64(),
    "iqr_us": pl.Float64(),
    "mean_us": pl.Float64(),
    "min_us": pl.Float64(),
    "runs": pl.Int64(),
    "max_abs_err": pl.Float64(),
    "max_rel_err": pl.Float64(),
    "trials": pl.Int64(),
    "device": pl.Utf8(),
    "torch_version": pl.Utf8(),
    "triton_version": pl.Utf8(),
    "python_version": pl.Utf8(),
    "timestamp": pl.Utf8(),
    "elapsed_s": pl.Float64(),
    "source": pl.Utf8(),
    "entry": pl.Utf8(),
    "kind": pl.Utf8(),
    "cache_key": pl.Utf8(),
    "program": pl.Utf8(),
    "hw": pl.Utf8(),
    "target": pl.Utf8(),
    "predicted_us": pl.Float64(),
}
"""Columns and dtypes of the ``measurements`` table."""

CANDIDATES_SCHEMA: dict[str, pl.DataType] = {
    "cache_key": pl.Utf8(),
    "program": pl.Utf8(),
    "program_hash": pl.Utf8(),
    "target": pl.Utf8(),
    "hw": pl.Utf8(),
    "id": pl.Utf8(),
    "kind": pl.Utf8(),
    "variant": pl.Utf8(),
    "rank": pl.Int64(),
    "plan": pl.Utf8(),
    "groups": pl.Int64(),
    "tilings": pl.Utf8(),
    "isa": pl.Utf8(),
    "lowering": pl.Utf8(),
    "rules": pl.Utf8(),
    "predicted_us": pl.Float64(),
    "source": pl.Utf8(),
    "timestamp": pl.Utf8(),
}
"""Columns and dtypes of the ``candidates`` table."""

SCHEMAS: dict[str, dict[str, pl.DataType]] = {"measurements": SCHEMA, "candidates": CANDIDATES_SCHEMA}
REQUIRED: dict[str, tuple[str, ...]] = {"measurements": ("id", "status"), "candidates": ("cache_key", "id")}
"""Columns that must be present (and non-null) in every appended row; all others are nullable."""


def cache_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The cache directory: ``path`` if given, else ``$AXON_EG_CACHE``, else ``~/.cache/axon_eg``."""
    if path is not None:
        return Path(path)
    env = os.environ.get("AXON_EG_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "axon_eg"


def _table_dir(table: str, cache: str | os.PathLike[str] | None) -> Path:
    if not table or "/" in table or table.startswith("."):
        raise ValueError(f"bad table name {table!r}")
    return cache_dir(cache) / "tables" / table


def _validate(table: str, columns: Iterable[str], rows: list[Mapping[str, Any]] | None = None) -> None:
    schema = SCHEMAS.get(table)
    if schema is None:
        return
    columns = list(columns)
    unknown = [c for c in columns if c not in schema]
    if unknown:
        raise ValueError(f"table {table!r}: unknown column {unknown[0]!r} (schema: {list(schema)})")
    for c in REQUIRED.get(table, ()):
        if c not in columns:
            raise ValueError(f"table {table!r}: missing required column {c!r}")
    for i, row in enumerate(rows or []):
        for c in REQUIRED.get(table, ()):
            if row.get(c) is None:
                raise ValueError(f"table {table!r}, row {i}: required column {c!r} is missing or null")


def _cell(value: Any, dtype: pl.DataType) -> Any:
    """JSON-encode a list or dict bound for a Utf8 column (``tilings``, ``isa``, ``rules``)."""
    if isinstance(value, (list, tuple, dict)) and dtype == pl.Utf8():
        return json.dumps(value, sort_keys=True)
    return value


def _conform(table: str, df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with exactly the table's schema columns, in order, cast; absent columns as nulls."""
    schema = SCHEMAS[table]
    return df.select([(pl.col(c) if c in df.columns else pl.lit(None)).cast(t).alias(c) for c, t in schema.items()])


def append(table: str, rows: Iterable[Mapping[str, Any]] | pl.DataFrame, cache: str | os.PathLike[str] | None = None,
           ) -> Path | None:
    """Atomically append ``rows`` to ``table`` as one new Parquet part; returns its path (None if no rows).
    Tables with a schema (``SCHEMAS``) are validated: an unknown column or a missing required one raises,
    naming it; missing nullable columns are filled with nulls."""
    if isinstance(rows, pl.DataFrame):
        df = rows
        if df.height:
            _validate(table, df.columns)
            required = [c for c in REQUIRED.get(table, ()) if df[c].null_count()]
            if required:
                raise ValueError(f"table {table!r}: required column {required[0]!r} has nulls")
    else:
        rows = [dict(r) for r in rows]
        if not rows:
            return None
        _validate(table, {c: None for r in rows for c in r}, rows)
        if table in SCHEMAS:
            schema = SCHEMAS[table]
            df = pl.DataFrame([{c: _cell(r.get(c), t) for c, t in schema.items()} for r in rows], schema=schema,
                              orient="row")
        else:
            df = pl.DataFrame(rows)
    if df.height == 0:
        return None
    if table in SCHEMAS:
        df = _conform(table, df)
    d = _table_dir(table, cache)
    d.mkdir(parents=True, exist_ok=True)
    name = f"part-{os.getpid()}-{uuid.uuid4().hex}.parquet"
    tmp = d / f".{name}.tmp"
    df.write_parquet(tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, d / name)
    return d / name


def read(table: str, cache: str | os.PathLike[str] | None = None) -> pl.LazyFrame:
    """All parts of ``table`` as one LazyFrame (empty, with the schema when known, if nothing was written).
    Parts written under an older schema are read with the newer columns as nulls."""
    d = _table_dir(table, cache)
    parts = sorted(d.glob("part-*.parquet")) if d.is_dir() else []
    schema = SCHEMAS.get(table)
    if not parts:
        return pl.LazyFrame(schema=schema or {})
    by_columns: dict[tuple[str, ...], list[Path]] = {}
    for p in parts:
        by_columns.setdefault(tuple(pl.read_parquet_schema(p)), []).append(p)
    frames = [pl.scan_parquet(ps) for ps in by_columns.values()]
    lf = frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed")
    if schema is None:
        return lf
    have = lf.collect_schema().names()
    return lf.select([(pl.col(c) if c in have else pl.lit(None)).cast(t).alias(c) for c, t in schema.items()])


def results(cache_dir: str | os.PathLike[str] | None = None, table: str = "measurements") -> pl.LazyFrame:
    """The ``measurements`` (or ``candidates``) table as a LazyFrame, e.g.
    ``results().filter(pl.col("status") == "ok").sort("median_us").collect()``."""
    return read(table, cache_dir)


def import_jsonl(path: str | os.PathLike[str], table: str = "measurements",
                 cache: str | os.PathLike[str] | None = None) -> int:
    """Load the worker's JSON-lines rows into ``table`` (a partial last line is ignored); returns the count."""
    rows = []
    for line in Path(path).read_text().splitlines(keepends=True):
        if not line.endswith("\n"):
            break
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    append(table, rows, cache)
    return len(rows)
