"""Polars result tables, stored as Parquet part files under a cache directory.

Location: ``cache_dir`` argument, else ``$AXON_EG_CACHE``, else ``~/.cache/axon_eg``; table ``T`` lives in
``<cache>/tables/T/part-*.parquet``. Appends are atomic: each call writes a new part file under a
temporary name in the same directory and ``os.replace``s it to a unique final name, so concurrent
writers never clobber each other and a reader never sees a half-written part. ``read`` scans all parts.

Schema of ``measurements`` (one row per observation of a candidate, as written by the worker):

==================  =========  ======================================================================
column              dtype      meaning
==================  =========  ======================================================================
id                  Utf8       candidate id (unique within its bundle)
status              Utf8       ok / syntax_error / compile_error / runtime_error / wrong_result /
                               timeout / crashed
stage               Utf8       where it stopped: syntax, startup, compile, run, correctness, timing,
                               reference, harness, done
error               Utf8       error text (None when ok)
median_us .. min_us Float64    latency statistics in microseconds (None on CPU)
runs, trials        Int64      timed runs, correctness trials
max_abs_err/_rel_   Float64    max absolute / relative error vs the float64 reference
device              Utf8       e.g. ``cuda (NVIDIA H200)`` or ``cpu``
*_version           Utf8       torch, triton and python versions
timestamp           Utf8       ISO 8601, UTC
elapsed_s           Float64    wall-clock seconds for the whole candidate
source, entry       Utf8       source file in the bundle and entry point
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
}
"""Columns and dtypes of the ``measurements`` table."""

SCHEMAS: dict[str, dict[str, pl.DataType]] = {"measurements": SCHEMA}


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


def _validate(table: str, rows: list[Mapping[str, Any]]) -> None:
    schema = SCHEMAS.get(table)
    if schema is None:
        return
    for i, row in enumerate(rows):
        unknown = [c for c in row if c not in schema]
        if unknown:
            raise ValueError(f"table {table!r}, row {i}: unknown column {unknown[0]!r} (schema: {list(schema)})")
        missing = [c for c in schema if c not in row]
        if missing:
            raise ValueError(f"table {table!r}, row {i}: missing column {missing[0]!r}")


def append(table: str, rows: Iterable[Mapping[str, Any]] | pl.DataFrame, cache: str | os.PathLike[str] | None = None,
           ) -> Path | None:
    """Atomically append ``rows`` to ``table`` as one new Parquet part; returns its path (None if no rows).
    Tables with a schema (``SCHEMAS``) are validated: an unknown or missing column raises, naming it."""
    if isinstance(rows, pl.DataFrame):
        df = rows
        _validate(table, [dict.fromkeys(df.columns)] if df.height else [])
    else:
        rows = [dict(r) for r in rows]
        _validate(table, rows)
        schema = SCHEMAS.get(table)
        df = pl.DataFrame(rows, schema=schema, orient="row") if schema else pl.DataFrame(rows)
    if df.height == 0:
        return None
    if table in SCHEMAS:
        df = df.select([pl.col(c).cast(t) for c, t in SCHEMAS[table].items()])
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
    """All parts of ``table`` as one LazyFrame (empty, with the schema when known, if nothing was written)."""
    d = _table_dir(table, cache)
    parts = sorted(d.glob("part-*.parquet")) if d.is_dir() else []
    if not parts:
        return pl.LazyFrame(schema=SCHEMAS.get(table, {}))
    return pl.scan_parquet(parts)


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
    schema = SCHEMAS.get(table)
    if schema is not None:
        rows = [{c: r.get(c) for c in schema} | {k: v for k, v in r.items() if k not in schema} for r in rows]
    append(table, rows, cache)
    return len(rows)
