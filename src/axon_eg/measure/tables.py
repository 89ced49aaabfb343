"""Polars result tables, stored as Parquet part files under a cache directory.

Location: ``cache_dir`` argument, else ``$AXON_EG_CACHE``, else ``~/.cache/axon_eg``; table ``T`` lives in
``<cache>/tables/T/part-<pid>-<uuid>.<sha256[:16]>.parquet``.

Writing. ``append`` is atomic: it writes a new part under a hidden temporary name in the table's directory,
fsyncs it and ``os.replace``s it to its final name, which carries the first 16 hex digits of the SHA-256 of
its bytes; concurrent writers never clobber each other and a reader never sees a half-written part. A cache
directory that cannot be written raises ``CacheError`` naming it (``ensure_writable`` checks up front).

Reading. ``read`` loads every part and checks it: the checksum in its name (parts written before checksums
were named ``part-<pid>-<uuid>.parquet`` and are only decoded), a full Parquet decode, the required columns
(``REQUIRED``) and a strict cast of every schema column to its dtype. A part that fails (empty, truncated,
zeroed, garbled, or of an incompatible schema) is moved to ``<cache>/tables/T/damaged/`` with one
``DamagedPartWarning`` naming the file and the reason, and the table is read without it; a read-only cache
leaves it in place and warns once per process. Parts written before a column was added read it as null;
columns a part has beyond the schema (a newer axon_eg) are dropped. Parts are immutable, so a process
remembers the parts it has checked (by path, size and modification time) and decodes each once.

``results`` (``ax.results()``) is ``read`` plus derived columns (``DERIVED``, not stored):

* ``superseded`` (both tables): True for an observation that a newer one replaces. ``measurements`` is an
  append-only log, one row per observation; a row is superseded when a newer row (by ``timestamp``, ties by
  storage order) of the same ``cache_key`` + ``id`` exists, e.g. after ``force=True`` re-measured it or a
  rerun retried a crash. A ``candidates`` row is superseded unless it belongs to the newest phase 1 of its
  ``cache_key`` (the rows with that key's largest ``timestamp``), and duplicates of it are superseded too.
  ``Result.table``, the selection and the cache use only rows that are not superseded.
* ``final`` (``measurements``): whether the status is deterministic for this source + toolchain (``is_final``).

Status taxonomy. Final (``FINAL_STATUSES``): ok, syntax_error, structure_error, wrong_result, and
compile_error / runtime_error unless the error text names an environment failure (``ENVIRONMENT_ERRORS``:
CUDA or host out of memory, a lost or busy device, a missing driver, a full disk, a dead Ray worker, ...).
Transient: crashed, timeout, skipped (the time budget ran out), interrupted, those environment failures, and
any status not listed. The pipeline caches a run only when every candidate's newest row is final and
measures the others again on the next run.

Removing. ``remove`` deletes the rows of some cache keys (rewriting parts that also hold other keys) and
extra paths (bundles) as one transaction: replacement parts are staged under hidden names, then a journal
``<cache>/tables/.rm-<uuid>.json`` is committed; applying it installs the replacements, deletes the old parts
and the paths. Whoever finds a journal (the remover, or any later ``read``) applies it again, idempotently,
so an interrupted removal completes instead of leaving duplicated or missing rows.

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
                               the budget was spent), interrupted; required. Final or transient: above
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
predicted_us        Float64    the cost model's latency prediction
source              Utf8       path of the emitted source file
timestamp           Utf8       ISO 8601, UTC: when its phase 1 ran (one value per phase 1)
superseded          Boolean    derived by ``results`` (not stored): not of the key's newest phase 1
==================  =========  ======================================================================
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from axon_eg.errors import AxonError

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
TRANSIENT_STATUSES = ("crashed", "timeout", "skipped", "interrupted")
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

CHECKSUM = re.compile(r"\.([0-9a-f]{16})\.parquet$")
"""The checksum in a part's name: the first 16 hex digits of the SHA-256 of its bytes."""
DAMAGED = "damaged"
"""Sub-directory of a table where unreadable parts are moved."""


class CacheError(AxonError, OSError):
    """The cache directory cannot be written (read-only, not a directory, full); names the directory."""


class DamagedPartWarning(UserWarning):
    """A Parquet part of a table could not be read; it was moved aside (the message names it and where)."""


class _Damaged(Exception):
    """Why a part is unreadable (internal)."""


_format_warning = warnings.formatwarning


def _one_line(message: Warning | str, category: type[Warning], filename: str, lineno: int, line: str | None = None) -> str:
    """``DamagedPartWarning`` prints as one line naming the file; other warnings as Python prints them."""
    if isinstance(category, type) and issubclass(category, DamagedPartWarning):
        return f"axon_eg: warning: {message}\n"
    return _format_warning(message, category, filename, lineno, line)


warnings.formatwarning = _one_line


def environment_failure(error: str | None) -> bool:
    """Whether an error text names an environment failure (``ENVIRONMENT_ERRORS``)."""
    text = (error or "").lower()
    return any(frag in text for frag in ENVIRONMENT_ERRORS)


def is_final(status: str | None, error: str | None = None) -> bool:
    """Whether a row with ``status`` (and ``error``) is final: see the module docstring's taxonomy."""
    if status in _ENV_STATUSES:
        return not environment_failure(error)
    return status in FINAL_STATUSES


def final_expr() -> pl.Expr:
    """``is_final`` as a Polars expression over the ``status`` and ``error`` columns (null status: False)."""
    env = pl.col("error").fill_null("").str.to_lowercase().str.contains_any(list(ENVIRONMENT_ERRORS))
    always = [s for s in FINAL_STATUSES if s not in _ENV_STATUSES]
    return (pl.col("status").is_in(always) | (pl.col("status").is_in(list(_ENV_STATUSES)) & ~env)).fill_null(False)


def cache_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The cache directory: ``path`` if given, else ``$AXON_EG_CACHE``, else ``~/.cache/axon_eg``."""
    if path is not None:
        return Path(path)
    env = os.environ.get("AXON_EG_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "axon_eg"


def _not_writable(root: Path, exc: OSError) -> CacheError:
    what = exc.strerror or type(exc).__name__
    where = f" ({exc.filename})" if exc.filename and Path(exc.filename) != root else ""
    return CacheError(f"the cache directory {root} is not writable: {what}{where}; choose another with --cache DIR "
                      "or $AXON_EG_CACHE")


def ensure_writable(cache: str | os.PathLike[str] | None = None) -> Path:
    """The cache directory, created if needed; raises ``CacheError`` naming it when it cannot be written."""
    root = cache_dir(cache)
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=root)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise _not_writable(root, exc) from None
    return root


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


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _stage_part(d: Path, df: pl.DataFrame) -> tuple[Path, Path]:
    """Write ``df`` under a hidden temporary name in ``d`` (fsynced); returns (temporary, final name)."""
    d.mkdir(parents=True, exist_ok=True)
    stem = f"part-{os.getpid()}-{uuid.uuid4().hex}"
    tmp = d / f".{stem}.tmp"
    try:
        df.write_parquet(tmp)
        with open(tmp, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()[:16]
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp, d / f"{stem}.{digest}.parquet"


def append(table: str, rows: Iterable[Mapping[str, Any]] | pl.DataFrame, cache: str | os.PathLike[str] | None = None,
           ) -> Path | None:
    """Atomically append ``rows`` to ``table`` as one new Parquet part; returns its path (None if no rows).
    Tables with a schema (``SCHEMAS``) are validated: an unknown column or a missing required one raises,
    naming it; missing nullable columns are filled with nulls. An unwritable cache raises ``CacheError``."""
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
    try:
        tmp, final = _stage_part(d, df)
        os.replace(tmp, final)
    except OSError as exc:
        raise _not_writable(cache_dir(cache), exc) from None
    _fsync_dir(d)
    return final


# ------------------------------------------------------------------------------------------------ reading


@dataclass(frozen=True)
class Part:
    """One readable part of a table: its file and its rows (conformed to the schema when the table has one)."""

    path: Path
    frame: pl.DataFrame


_MEMO: dict[Path, tuple[int, int, str, pl.DataFrame]] = {}
_MEMO_MAX = 8192
_WARNED: set[str] = set()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


def _decode(table: str, path: Path, data: bytes) -> pl.DataFrame:
    """The part's rows, checked (see the module docstring); raises _Damaged with the reason."""
    if not data:
        raise _Damaged("empty file")
    m = CHECKSUM.search(path.name)
    if m and hashlib.sha256(data).hexdigest()[:16] != m.group(1):
        raise _Damaged(f"checksum mismatch: its {len(data)} bytes changed after it was written")
    try:
        df = pl.read_parquet(io.BytesIO(data))
    except (Exception, pl.exceptions.PanicException) as exc:  # a panic in the decoder is a BaseException
        raise _Damaged(f"not readable as Parquet: {_first_line(exc)}") from None
    schema = SCHEMAS.get(table)
    if schema is None:
        return df
    missing = [c for c in REQUIRED.get(table, ()) if c not in df.columns]
    if missing:
        raise _Damaged(f"incompatible schema: no column {missing[0]!r}")
    for c, t in schema.items():
        if c in df.columns and df.schema[c] != t:
            try:
                df[c].cast(t, strict=True)
            except (Exception, pl.exceptions.PanicException):
                raise _Damaged(f"incompatible schema: column {c!r} is {df.schema[c]}, not {t}") from None
    return _conform(table, df)


def _quarantine(table: str, path: Path, reason: str) -> None:
    """Move an unreadable part to the table's ``damaged/`` directory and warn once, naming it."""
    dest_dir = path.parent / DAMAGED
    try:
        dest_dir.mkdir(exist_ok=True)
        dest = dest_dir / path.name
        if dest.exists():
            dest = dest_dir / f"{path.stem}-{uuid.uuid4().hex[:8]}{path.suffix}"
        os.replace(path, dest)
        where = f"moved to {dest}"
    except FileNotFoundError:  # another process moved (and reported) it first
        return
    except OSError as exc:
        where = f"left in place (cannot move it: {exc.strerror or exc})"
    msg = f"damaged Parquet part {path} of table {table!r} ({reason}); {where}; the table is read without it"
    if msg in _WARNED:  # a part left in place is found again by every read: say it once per process
        return
    _WARNED.add(msg)
    warnings.warn(msg, DamagedPartWarning, stacklevel=3)


def _load(table: str, path: Path) -> pl.DataFrame | None:
    """The part's checked rows, or None when it is gone or damaged (then moved aside, with a warning)."""
    try:
        st = path.stat()
        memo = _MEMO.get(path)
        if memo is not None and memo[:3] == (st.st_size, st.st_mtime_ns, table):
            return memo[3]
        data = path.read_bytes()
    except FileNotFoundError:  # moved aside or removed meanwhile
        return None
    except OSError as exc:
        _quarantine(table, path, f"cannot be read: {exc.strerror or exc}")
        return None
    try:
        frame = _decode(table, path, data)
    except _Damaged as why:
        _MEMO.pop(path, None)
        _quarantine(table, path, str(why))
        return None
    if len(_MEMO) >= _MEMO_MAX:
        _MEMO.pop(next(iter(_MEMO)))
    _MEMO[path] = (st.st_size, st.st_mtime_ns, table, frame)
    return frame


def parts(table: str, cache: str | os.PathLike[str] | None = None) -> list[Part]:
    """Every readable part of ``table``, checked; damaged ones are moved aside with a warning (module docstring)."""
    d = _table_dir(table, cache)
    for _ in range(3):
        pending = _recover(cache)
        found = [Part(p, f) for p in (sorted(d.glob("part-*.parquet")) if d.is_dir() else [])
                 if (f := _load(table, p)) is not None]
        if not pending and not _journals(cache):  # no removal started while we listed: a consistent view
            break
    return found


def read(table: str, cache: str | os.PathLike[str] | None = None) -> pl.LazyFrame:
    """All readable parts of ``table`` as one LazyFrame (empty, with the schema when known, if nothing was
    written); see the module docstring for the checks and damaged parts. Only the stored columns."""
    frames = [p.frame for p in parts(table, cache)]
    schema = SCHEMAS.get(table)
    if not frames:
        return pl.LazyFrame(schema=schema or {})
    if schema is None:
        return pl.concat(frames, how="diagonal_relaxed").lazy()
    return pl.concat(frames, how="vertical").lazy()


def with_derived(lf: pl.LazyFrame, table: str = "measurements") -> pl.LazyFrame:
    """``lf`` (rows of ``table`` in storage order) with the ``DERIVED`` columns of the module docstring."""
    if table not in DERIVED:
        return lf
    ts = pl.col("timestamp").fill_null("")
    row = pl.col("_axon_row")
    newest = row.sort_by(ts, maintain_order=True).last().over(["cache_key", "id"])
    lf = lf.with_row_index("_axon_row")
    if table == "measurements":
        lf = lf.with_columns((row != newest).alias("superseded"), final_expr().alias("final"))
    else:
        lf = lf.with_columns(((row != newest) | (ts != ts.max().over("cache_key"))).alias("superseded"))
    return lf.drop("_axon_row")


def results(cache_dir: str | os.PathLike[str] | None = None, table: str = "measurements") -> pl.LazyFrame:
    """The ``measurements`` (or ``candidates``) table as a LazyFrame with the derived ``superseded`` (and
    ``final``) columns, e.g. ``results().filter(~pl.col("superseded") & (pl.col("status") == "ok"))``."""
    return with_derived(read(table, cache_dir), table)


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


# ------------------------------------------------------------------------------------------------ removing


@dataclass
class Removal:
    """What ``remove`` removed (or, with ``dry_run``, would remove)."""

    rows: dict[str, int] = field(default_factory=dict)  # table -> rows removed
    parts_deleted: int = 0
    parts_rewritten: int = 0
    paths: list[Path] = field(default_factory=list)  # extra paths deleted (bundles, files)
    bytes: int = 0  # bytes freed (approximate for rewritten parts)


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _journals(cache: str | os.PathLike[str] | None) -> list[Path]:
    d = cache_dir(cache) / "tables"
    return sorted(d.glob(".rm-*.json")) if d.is_dir() else []


def _apply(root: Path, journal: Path) -> None:
    """Carry out a committed removal journal (idempotent: several processes may apply one at once)."""
    try:
        plan = json.loads(journal.read_text())
    except FileNotFoundError:
        return
    except (OSError, ValueError):  # not a committed journal (commit is an atomic rename): nothing to do
        return
    for tmp, final in plan.get("install", []):
        try:
            os.replace(root / tmp, root / final)
        except FileNotFoundError:
            pass
    for p in plan.get("remove", []):
        (root / p).unlink(missing_ok=True)
    for src, trash in plan.get("delete", []):
        src_p, trash_p = root / src, root / trash
        if src_p.is_dir() and not src_p.is_symlink():
            try:
                os.replace(src_p, trash_p)
            except FileNotFoundError:
                pass
        elif src_p.exists() or src_p.is_symlink():
            src_p.unlink(missing_ok=True)
        if trash_p.exists():
            shutil.rmtree(trash_p, ignore_errors=True)
    journal.unlink(missing_ok=True)
    for p in plan.get("remove", []):
        _MEMO.pop(root / p, None)


def _recover(cache: str | os.PathLike[str] | None) -> bool:
    """Apply any removal journal left under the cache (an interrupted ``remove``); True if there was one."""
    found = _journals(cache)
    for j in found:
        try:
            _apply(cache_dir(cache), j)
        except OSError:  # a read-only cache: read what is there
            pass
    return bool(found)


def remove(keys: Collection[str] | None, cache: str | os.PathLike[str] | None = None, *,
           delete: Sequence[str | os.PathLike[str]] = (), dry_run: bool = False,
           tables: Sequence[str] = ("measurements", "candidates")) -> Removal:
    """Remove the rows whose ``cache_key`` is in ``keys`` (None: every row) from ``tables``, and delete the
    files and directories ``delete`` (inside the cache), as one transaction (see the module docstring)."""
    root = cache_dir(cache)
    out = Removal(rows=dict.fromkeys(tables, 0))
    plan: dict[str, list[Any]] = {"install": [], "remove": [], "delete": []}
    staged: list[Path] = []

    def rel(p: Path) -> str:
        return os.path.relpath(p, root)

    try:
        for table in tables:
            for part in parts(table, cache):
                df = part.frame
                if keys is None:
                    hit = df.height
                elif "cache_key" in df.columns:
                    hit = int(df["cache_key"].is_in(list(keys)).sum())
                else:
                    hit = 0
                if not hit:
                    continue
                out.rows[table] += hit
                size = part.path.stat().st_size
                plan["remove"].append(rel(part.path))
                if hit == df.height:
                    out.parts_deleted += 1
                    out.bytes += size
                    continue
                out.parts_rewritten += 1
                rest = df.filter(~pl.col("cache_key").is_in(list(keys or ())).fill_null(False))
                if dry_run:
                    out.bytes += size * hit // df.height
                    continue
                tmp, final = _stage_part(part.path.parent, rest)
                staged.append(tmp)
                out.bytes += max(0, size - tmp.stat().st_size)
                plan["install"].append([rel(tmp), rel(final)])
        for p in map(Path, delete):
            if not (p.exists() or p.is_symlink()):
                continue
            out.paths.append(p)
            out.bytes += _size(p)
            plan["delete"].append([rel(p), rel(p.with_name(f".trash-{uuid.uuid4().hex}"))])
        if dry_run or not any(plan.values()):
            return out
        journal = root / "tables" / f".rm-{uuid.uuid4().hex}.json"
        journal.parent.mkdir(parents=True, exist_ok=True)
        tmp_j = journal.with_suffix(".tmp")
        with open(tmp_j, "w") as f:
            json.dump(plan, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_j, journal)  # the commit point: from here on any reader completes the removal
    except OSError as exc:
        for t in staged:
            t.unlink(missing_ok=True)
        raise _not_writable(root, exc) from None
    except BaseException:
        for t in staged:
            t.unlink(missing_ok=True)
        raise
    _fsync_dir(journal.parent)
    _apply(root, journal)
    return out
