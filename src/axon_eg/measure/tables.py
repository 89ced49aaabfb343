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

Tables with a schema (``SCHEMAS``) are validated on append. The schemas, the status taxonomy and the
append-side validation are in :mod:`axon_eg.measure.table_schemas` (its docstring documents every column of
``measurements`` and ``candidates``); the part files themselves (cache directory, staging, the checks on
reading, quarantine of damaged parts) in :mod:`axon_eg.measure.part_store`: import each name from its own
module; this one is the public read / append / remove.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from axon_eg.measure.manifest import read_rows
from axon_eg.measure.part_store import (
    MEMO,
    Part,
    cache_dir,
    ensure_writable,  # noqa: F401 - re-exported: pipeline.py reads tables.ensure_writable
    fsync_dir,
    load_part,
    not_writable,
    stage_part,
    table_dir,
)
from axon_eg.measure.table_schemas import (
    DERIVED,
    REQUIRED,
    SCHEMA,  # noqa: F401 - re-exported: pipeline.py reads tables.SCHEMA
    SCHEMAS,
    cell_value,
    conform,
    final_expr,
    is_final,  # noqa: F401 - re-exported: pipeline.py reads tables.is_final
    validate_columns,
)


def append(table: str, rows: Iterable[Mapping[str, Any]] | pl.DataFrame, cache: str | os.PathLike[str] | None = None,
           ) -> Path | None:
    """Atomically append ``rows`` to ``table`` as one new Parquet part; returns its path (None if no rows).
    Tables with a schema (``SCHEMAS``) are validated: an unknown column or a missing required one raises,
    naming it; missing nullable columns are filled with nulls. An unwritable cache raises ``CacheError``."""
    if isinstance(rows, pl.DataFrame):
        df = rows
        if df.height:
            validate_columns(table, df.columns)
            required = [c for c in REQUIRED.get(table, ()) if df[c].null_count()]
            if required:
                raise ValueError(f"table {table!r}: required column {required[0]!r} has nulls")
    else:
        rows = [dict(r) for r in rows]
        if not rows:
            return None
        validate_columns(table, {c: None for r in rows for c in r}, rows)
        if table in SCHEMAS:
            schema = SCHEMAS[table]
            df = pl.DataFrame([{c: cell_value(r.get(c), t) for c, t in schema.items()} for r in rows], schema=schema,
                              orient="row")
        else:
            df = pl.DataFrame(rows)
    if df.height == 0:
        return None
    if table in SCHEMAS:
        df = conform(table, df)
    d = table_dir(table, cache)
    try:
        tmp, final = stage_part(d, df)
        os.replace(tmp, final)
    except OSError as exc:
        raise not_writable(cache_dir(cache), exc) from None
    fsync_dir(d)
    return final


# ------------------------------------------------------------------------------------------------ reading

def parts(table: str, cache: str | os.PathLike[str] | None = None) -> list[Part]:
    """Every readable part of ``table``, checked; damaged ones are moved aside with a warning (module docstring)."""
    d = table_dir(table, cache)
    for _ in range(3):
        pending = _recover(cache)
        found = [Part(p, f) for p in (sorted(d.glob("part-*.parquet")) if d.is_dir() else [])
                 if (f := load_part(table, p)) is not None]
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
    Path(path).open().close()  # a missing file is an error here, not zero rows
    rows = read_rows(path)
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
        MEMO.pop(root / p, None)


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
                tmp, final = stage_part(part.path.parent, rest)
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
        raise not_writable(root, exc) from None
    except BaseException:
        for t in staged:
            t.unlink(missing_ok=True)
        raise
    fsync_dir(journal.parent)
    _apply(root, journal)
    return out
