"""The schemas of the result tables and the status taxonomy (part of :mod:`axon_eg.measure.tables`):
``SCHEMAS`` (column -> Polars dtype), ``REQUIRED``, the ``DERIVED`` columns that ``results`` adds, which
statuses are final (``is_final``, ``final_expr``), and the append-side checks.

Tables with a schema (``SCHEMAS``) are validated on append: an unknown column raises, naming it; a
missing required column (``REQUIRED``) raises; other missing columns are filled with nulls. Lists and
dicts bound for Utf8 columns (the JSON columns) are JSON-encoded.

Schema of ``measurements`` (one row per observation of a candidate, as written by the worker):

==================  =========  ======================================================================
column              dtype      meaning
==================  =========  ======================================================================
id                  Utf8       candidate id (unique within its bundle); required
status              Utf8       ok / syntax_error / structure_error / compile_error / runtime_error /
                               wrong_result / timeout / crashed (the worker), skipped (not measured:
                               the budget was spent), interrupted, performance (stopped after its first
                               timed runs: 10x the fastest kernel so far); required. Final or transient: tables' taxonomy
stage               Utf8       where it stopped: enumerate, emit (phase 1), syntax, structure, startup, compile, run,
                               correctness, timing, reference, harness, ray, budget, done
error               Utf8       error text (None when ok)
median_us .. min_us Float64    latency statistics in microseconds (None on CPU)
runs, trials        Int64      timed runs, correctness trials
max_abs_err/_rel_   Float64    max absolute / relative error vs the float64 reference
device              Utf8       e.g. ``cuda (NVIDIA H200)`` or ``cpu``
*_version           Utf8       torch, triton and python versions
timestamp           Utf8       ISO 8601, UTC: when the observation was made (orders ``superseded``)
elapsed_s           Float64    wall-clock seconds for the whole candidate
source, entry       Utf8       source file in the bundle and entry point
kind                Utf8       candidate / baseline (baselines: ids ``torch_eager``, ``torch_compile``)
cache_key           Utf8       key of the optimization run (program, hardware, target, k, toolchain)
program             Utf8       program name
hw                  Utf8       hardware model name, e.g. ``H200``
target              Utf8       code generation target, e.g. ``triton``
predicted_us        Float64    the cost model's latency prediction
probe_us            Utf8       JSON: a shape-generic candidate's median latency at each other size of its bucket
                               it was timed at (``{"M=2": 11.5, "M=6": 12.0}``; ``axon_eg.buckets``), else null
bundle              Utf8       key of the bundle the worker measured it from (its directory's name; rows imported
                               with ``rows=`` must carry their run's own), null in rows written before it was kept
constant_reference  Boolean    the reference's outputs were the same for two trials' inputs (it depends on no input:
                               a report keeps the problem out of a geomean); null otherwise
superseded          Boolean    derived by ``results`` (not stored): a newer observation replaces this row
final               Boolean    derived by ``results`` (not stored): the status is final (``is_final``)
==================  =========  ======================================================================

Schema of ``candidates`` (static facts, one row per emitted candidate and phase 1; joins ``measurements`` on
``cache_key`` + ``id``):

==================  =========  ======================================================================
column              dtype      meaning
==================  =========  ======================================================================
cache_key           Utf8       key of the optimization run; required
program             Utf8       program name
program_hash        Utf8       hash of the input program
target, hw          Utf8       code generation target and hardware model
k                   Int64      the number of candidates asked for (null in rows written before it was kept)
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
predicted_us        Float64    the cost model's latency prediction (at ``tuned_at`` where set)
tuned_at            Utf8       the sizes its tiling was chosen at when they are not the run's own (a shape
                               bucket's low end or middle, e.g. ``M=2``), else null
source              Utf8       path of the emitted source file
timestamp           Utf8       ISO 8601, UTC: when its phase 1 ran (one value per phase 1)
superseded          Boolean    derived by ``results`` (not stored): not of the key's newest phase 1
==================  =========  ======================================================================
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
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
    "probe_us": pl.Utf8(),
    "bundle": pl.Utf8(),
    "constant_reference": pl.Boolean(),
}
"""Columns and dtypes of the ``measurements`` table."""

CANDIDATES_SCHEMA: dict[str, pl.DataType] = {
    "cache_key": pl.Utf8(),
    "program": pl.Utf8(),
    "program_hash": pl.Utf8(),
    "target": pl.Utf8(),
    "hw": pl.Utf8(),
    "k": pl.Int64(),
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
    "tuned_at": pl.Utf8(),
    "source": pl.Utf8(),
    "timestamp": pl.Utf8(),
}
"""Columns and dtypes of the ``candidates`` table."""

SCHEMAS: dict[str, dict[str, pl.DataType]] = {"measurements": SCHEMA, "candidates": CANDIDATES_SCHEMA}
REQUIRED: dict[str, tuple[str, ...]] = {"measurements": ("id", "status"), "candidates": ("cache_key", "id")}
"""Columns that must be present (and non-null) in every appended row; all others are nullable."""
DERIVED: dict[str, dict[str, pl.DataType]] = {"measurements": {"superseded": pl.Boolean(), "final": pl.Boolean()},
                                              "candidates": {"superseded": pl.Boolean()}}
"""Columns ``results`` adds to a table (computed on reading, never stored)."""

FINAL_STATUSES = ("ok", "syntax_error", "structure_error", "compile_error", "runtime_error", "wrong_result")
"""Statuses deterministic for a given source + toolchain (compile_error and runtime_error only when their error
names no environment failure, ``ENVIRONMENT_ERRORS``): the cache keeps them and a rerun does not measure them."""
TRANSIENT_STATUSES = ("crashed", "timeout", "skipped", "interrupted", "performance")
"""Statuses a rerun measures again (so are unknown statuses and environment failures)."""
ENVIRONMENT_ERRORS = (
    "out of memory", "outofmemoryerror", "memoryerror", "cannot allocate memory", "cudaerrormemoryallocation",
    "no space left on device", "too many open files", "resource temporarily unavailable",
    "no cuda gpus are available", "no cuda-capable device", "cuda driver", "nvidia driver", "busy or unavailable",
    "cudaerrordevicesunavailable", "cuda error: initialization error", "cuda error: system not yet initialized",
    "ecc error", "fallen off the bus", "device lost", "gpu is lost", "device has been lost", "nvml",
    "worker died", "workercrashederror", "nodediederror", "raysystemerror", "objectlosterror",
    "broken pipe", "connection reset", "keyboardinterrupt",
)
"""Lower-case fragments of a compile_error / runtime_error text that blame the environment, not the candidate."""
_ENV_STATUSES = ("compile_error", "runtime_error")

def environment_failure(error: str | None) -> bool:
    """Whether an error text names an environment failure (``ENVIRONMENT_ERRORS``)."""
    text = (error or "").lower()
    return any(frag in text for frag in ENVIRONMENT_ERRORS)


def is_final(status: str | None, error: str | None = None) -> bool:
    """Whether a row with ``status`` (and ``error``) is final: see the status taxonomy in :mod:`axon_eg.measure.tables`."""
    if status in _ENV_STATUSES:
        return not environment_failure(error)
    return status in FINAL_STATUSES


def final_expr() -> pl.Expr:
    """``is_final`` as a Polars expression over the ``status`` and ``error`` columns (null status: False)."""
    env = pl.col("error").fill_null("").str.to_lowercase().str.contains_any(list(ENVIRONMENT_ERRORS))
    always = [s for s in FINAL_STATUSES if s not in _ENV_STATUSES]
    return (pl.col("status").is_in(always) | (pl.col("status").is_in(list(_ENV_STATUSES)) & ~env)).fill_null(False)


def validate_columns(table: str, columns: Iterable[str], rows: list[Mapping[str, Any]] | None = None) -> None:
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


def cell_value(value: Any, dtype: pl.DataType) -> Any:
    """JSON-encode a list or dict bound for a Utf8 column (``tilings``, ``isa``, ``rules``)."""
    if isinstance(value, (list, tuple, dict)) and dtype == pl.Utf8():
        return json.dumps(value, sort_keys=True)
    return value


def conform(table: str, df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with exactly the table's schema columns, in order, cast; absent columns as nulls."""
    schema = SCHEMAS[table]
    return df.select([(pl.col(c) if c in df.columns else pl.lit(None)).cast(t).alias(c) for c, t in schema.items()])


