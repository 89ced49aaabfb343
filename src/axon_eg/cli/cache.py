"""``axon-eg cache ls|rm``: the optimization runs stored in the cache directory.

    axon-eg cache ls [--program NAME] [--cache DIR]
    axon-eg cache rm KEY [KEY ...] | --program NAME | --all  [--dry-run] [--cache DIR]

The cache directory is ``--cache DIR``, else ``$AXON_EG_CACHE``, else ``~/.cache/axon_eg``. A *run* is one
cache key (program, sizes, hardware file, target, k, toolchain): its rows in the ``candidates`` and
``measurements`` tables, its bundle ``<cache>/bundles/<bundle key>/`` (sources, manifest, reference) and
the worker's resume file ``rows-<key>.jsonl`` in it. Runs that differ only in the toolchain share a bundle.

``ls`` prints one line per run: program, key, hardware, target, k, when (its newest observation, UTC), the
selected kernel, the status counts of its candidates' newest observations, ``cached`` when a rerun returns
the stored choice without measuring (every observation final) or how many candidates a rerun measures
again, and the size on disk (its bundle, the table parts that hold only its rows; a bundle shared by several
runs is counted for each, the total line is the directory's real size). Exit status 0.

``rm`` removes the named runs (a KEY may be any unique prefix of at least 4 characters), every run of a
program, or everything: their rows (parts holding other runs' rows too are rewritten without them), their
resume files, and their bundles unless another run still uses them, as one transaction
(:func:`axon_eg.measure.tables.remove`); ``--all`` also removes bundles no run refers to. It prints one line.
Exit status: 0 when removed (``--all`` also on an empty cache), 1 when no run matched (nothing is removed),
2 on a usage error (no selector, an ambiguous or too short KEY) or an unwritable cache directory.

Damaged table parts found while reading are moved aside with one warning line each (see
:mod:`axon_eg.measure.tables`); ``rm --all`` keeps the ``damaged/`` directories.

The options are registered by :func:`axon_eg.cli.add_cache`; this module, which loads polars (the tables), is
imported only when a ``cache`` command runs (``axon-eg --help`` stays free of it).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from axon_eg.errors import AxonError
from axon_eg.measure import part_store, table_schemas, tables
from axon_eg.selection import choose
from axon_eg.validate import MIN_KEY_PREFIX


class CacheUsageError(AxonError):
    """A ``cache`` command that cannot be carried out as given (no selector, an ambiguous key)."""


@dataclass
class CachedRun:
    """One cache key's run, as ``axon-eg cache ls`` shows it."""

    key: str
    program: str | None = None
    hw: str | None = None
    target: str | None = None
    k: int | None = None
    when: str | None = None  # the newest observation's timestamp (else the newest phase 1's)
    best: str | None = None  # the selected id, None when nothing ran correctly
    statuses: dict[str, int] = field(default_factory=dict)  # status of each candidate's newest observation
    candidates: int = 0  # candidates and baselines of its newest phase 1
    retry: int = 0  # of them, those a rerun measures again (no final observation)
    bundles: list[Path] = field(default_factory=list)
    size: int = 0  # bytes on disk: bundles, resume file, parts holding only this run's rows

    @property
    def cached(self) -> bool:
        """Whether a rerun returns the stored choice without measuring."""
        return self.candidates > 0 and self.retry == 0


def _dir_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for base, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(base, f)).st_size
            except OSError:
                pass
    return total


def inventory(cache: str | os.PathLike[str] | None = None) -> list[CachedRun]:
    """Every run in the cache, sorted by program then newest first."""
    root = part_store.cache_dir(cache)

    def current(table: str) -> tuple[pl.DataFrame, list[Any]]:
        found = tables.parts(table, cache)
        frame = pl.concat([p.frame for p in found]) if found else pl.DataFrame(schema=table_schemas.SCHEMAS[table])
        df = tables.with_derived(frame.lazy(), table).filter(~pl.col("superseded")).drop("superseded").collect()
        return df, found

    cands, cand_parts = current("candidates")
    meas, meas_parts = current("measurements")
    part_size: dict[str, int] = {}
    for part in [*cand_parts, *meas_parts]:
        keys = part.frame["cache_key"].unique().to_list()
        if len(keys) == 1 and keys[0]:
            part_size[keys[0]] = part_size.get(keys[0], 0) + part.path.stat().st_size
    keys = sorted({k for k in [*cands["cache_key"].to_list(), *meas["cache_key"].to_list()] if k})
    runs = []
    for key in keys:
        c = cands.filter(pl.col("cache_key") == key)
        m = meas.filter(pl.col("cache_key") == key)
        run = CachedRun(key)
        first = (c if c.height else m).row(0, named=True)
        run.program, run.hw, run.target = first.get("program"), first.get("hw"), first.get("target")
        run.k = c["k"].max() if c.height else None  # type: ignore[assignment]
        stamps = m["timestamp"].drop_nulls() if m.height else c["timestamp"].drop_nulls()
        run.when = stamps.max() if len(stamps) else None  # type: ignore[assignment]
        if c.height:
            table, run.best, _ = choose(c, m)
            run.candidates = c.height
            run.retry = int(table.filter(~pl.col("final").fill_null(False)).height)
            statuses = table["status"].fill_null("not measured").to_list()
        else:  # rows without a phase 1 (imported by hand)
            run.retry = int(m.filter(~pl.col("final")).height)
            statuses = m["status"].to_list()
        for s in statuses:
            run.statuses[s] = run.statuses.get(s, 0) + 1
        dirs = {root / "bundles" / Path(s).parent.name for s in c["source"].drop_nulls().to_list()}
        dirs |= {p.parent for p in (root / "bundles").glob(f"*/rows-{key}.jsonl")}
        run.bundles = sorted(d for d in dirs if d.is_dir())
        run.size = part_size.get(key, 0) + sum(_dir_size(d) for d in run.bundles)
        runs.append(run)
    runs.sort(key=lambda r: r.when or "", reverse=True)
    runs.sort(key=lambda r: r.program or "")
    return runs


def human_size(n: int) -> str:
    """Bytes as ``512 B``, ``1.2 kB``, ``3.4 MB`` (powers of 1000)."""
    size = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"


def _when(ts: str | None) -> str:
    if not ts:
        return ""
    try:
        t = dt.datetime.fromisoformat(ts)
    except ValueError:
        return ts[:16]
    if t.tzinfo is not None:
        t = t.astimezone(dt.UTC)
    return t.strftime("%Y-%m-%d %H:%M")


def _status_text(statuses: dict[str, int]) -> str:
    order = [*table_schemas.FINAL_STATUSES, *table_schemas.TRANSIENT_STATUSES]
    ranked = sorted(statuses.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[0]))
    return ", ".join(f"{s} {n}" for s, n in ranked)


def _console() -> Any:
    from rich.console import Console

    console = Console(highlight=False)
    if not console.is_terminal:  # piped or captured: do not fold the keys
        console.width = max(console.width, 200)
    return console


def cmd_ls(args: argparse.Namespace) -> int:
    from rich.table import Table

    root = part_store.cache_dir(args.cache)
    runs = [r for r in inventory(args.cache) if not args.program or r.program in args.program]
    console = _console()
    if not runs:
        what = f" of program {', '.join(args.program)}" if args.program else ""
        console.print(f"no cached runs{what} in {root}", markup=False)
        return 0
    table = Table(title=f"{len(runs)} cached run{'s' * (len(runs) != 1)} in {root}")
    for col in ("program", "key", "hw", "target", "k", "when (UTC)", "best", "statuses", "cached", "size"):
        table.add_column(col, justify="right" if col in ("k", "size") else "left", no_wrap=col in ("key", "when (UTC)"))
    for r in runs:
        table.add_row(r.program or "-", r.key, r.hw or "-", r.target or "-", "-" if r.k is None else str(r.k), _when(r.when),
                      r.best or "-", _status_text(r.statuses), "yes" if r.cached else f"{r.retry} to retry",
                      human_size(r.size))
    console.print(table)
    damaged = sum(1 for t in table_schemas.SCHEMAS for _ in (root / "tables" / t / part_store.DAMAGED).glob("*.parquet"))
    note = f"; {damaged} damaged part{'s' * (damaged != 1)} kept in tables/*/{part_store.DAMAGED}/" if damaged else ""
    console.print(f"total on disk: {human_size(_dir_size(root))}{note}", markup=False)
    return 0


def _select(runs: list[CachedRun], args: argparse.Namespace) -> tuple[list[CachedRun], list[str]]:
    """The runs ``rm`` names, and the selectors that matched none."""
    if args.all:
        return runs, []
    if args.program:
        chosen = [r for r in runs if r.program in args.program]
        return chosen, [f"program {p!r}" for p in args.program if not any(r.program == p for r in runs)]
    chosen, missing = [], []
    for given in args.keys:
        if len(given) < MIN_KEY_PREFIX:
            raise CacheUsageError(f"cache rm: key {given!r} is too short (give at least {MIN_KEY_PREFIX} characters)")
        hits = [r for r in runs if r.key.startswith(given)]
        if len(hits) > 1:
            raise CacheUsageError(f"cache rm: key {given!r} is ambiguous: {', '.join(r.key for r in hits)}")
        if hits:
            chosen += [h for h in hits if h not in chosen]
        else:
            missing.append(given)
    return chosen, missing


def cmd_rm(args: argparse.Namespace) -> int:
    if (bool(args.keys) + bool(args.program) + bool(args.all)) != 1:
        raise CacheUsageError("cache rm: name the runs to remove: KEY [KEY ...], --program NAME or --all")
    root = part_store.cache_dir(args.cache)
    runs = inventory(args.cache)
    chosen, missing = _select(runs, args)
    if missing:
        print(f"axon-eg: no cached run matches {', '.join(missing)} in {root}; nothing removed", file=sys.stderr)
        return 1
    keys = {r.key for r in chosen}
    others = [r for r in runs if r.key not in keys]
    if args.all:
        bundles = root / "bundles"
        delete = sorted(p for p in bundles.iterdir() if not p.name.startswith(".")) if bundles.is_dir() else []
    else:
        delete = []
        for r in chosen:
            for b in r.bundles:
                if any(b in o.bundles for o in others):
                    delete.append(b / f"rows-{r.key}.jsonl")  # the bundle serves another run: only the resume file
                elif b not in delete:
                    delete.append(b)
    removal = tables.remove(None if args.all else keys, args.cache, delete=delete, dry_run=args.dry_run)
    if not chosen and not removal.paths and not any(removal.rows.values()):
        print(f"nothing to remove in {root}")
        return 0
    names = ", ".join(f"{r.program or '-'} {r.key[:8]}" for r in chosen[:3]) + (f", +{len(chosen) - 3} more"
                                                                               if len(chosen) > 3 else "")
    n_bundles = sum(1 for p in removal.paths if not p.name.startswith("rows-"))
    print(f"{'would remove' if args.dry_run else 'removed'} {len(chosen)} run{'s' * (len(chosen) != 1)}"
          f"{f' ({names})' if chosen else ''}: {removal.rows.get('measurements', 0)} measurement rows, "
          f"{removal.rows.get('candidates', 0)} candidate rows, {n_bundles} bundle{'s' * (n_bundles != 1)}, "
          f"{human_size(removal.bytes)} {'to free' if args.dry_run else 'freed'} in {root}")
    return 0

