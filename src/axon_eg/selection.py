"""Selection: which kernel of a run is returned, and every candidate's verdict.

:func:`choose` joins one run's candidates with their newest observations. When latencies were measured
it rejects correct candidates slower than the best baseline (the performance stage) and selects the
fastest correct kernel (in a shape bucket, whose candidates were also timed at the bucket's other sizes:
the candidate whose worst ratio to the fastest at any of those sizes is smallest, ``measure.spread``,
unless a baseline is faster at the tuned size; the ratio is the ``bucket_worst`` column); on a machine
without a GPU (Triton interpreter, correctness only) the correct
candidate with the lowest predicted cost. :func:`select` turns the choice into a :class:`~axon_eg.result.Result`,
or raises :class:`~axon_eg.result.PipelineError` carrying the table when nothing ran correctly.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from axon_eg.cache import latest, manifest
from axon_eg.ir.program import Program
from axon_eg.measure import spread
from axon_eg.result import BestKernel, PipelineError, Result

VERDICTS = {"syntax_error": "syntax", "structure_error": "structure", "wrong_result": "correctness",
            "compile_error": "compile", "runtime_error": "run", "timeout": "timeout", "crashed": "crashed",
            "skipped": "budget", "interrupted": "interrupted"}


def choose(cands: pl.DataFrame, meas: pl.DataFrame) -> tuple[pl.DataFrame, str | None, bool]:
    """The selection over one run's candidates and their newest observations: (the joined table with
    ``verdict`` and speedups, the selected id or None, whether latencies were measured); see the module
    docstring (the fastest correct kernel, else on the CPU the correct candidate predicted fastest)."""
    keep = [c for c in meas.columns if c not in cands.columns or c == "id"]
    df = cands.join(meas.select(keep), on="id", how="left").sort(["kind", "rank"], nulls_last=True)
    timed = df.filter((pl.col("status") == "ok") & pl.col("median_us").is_not_null()).height > 0
    ok = df.filter(pl.col("status") == "ok")
    base = ok.filter(pl.col("kind") == "baseline")
    timed_base = df.filter((pl.col("kind") == "baseline") & pl.col("median_us").is_not_null())  # ok or not
    eager = timed_base.filter(pl.col("id") == "torch_eager")["median_us"].first() if timed else None
    comp = timed_base.filter(pl.col("id") == "torch_compile")["median_us"].first() if timed else None
    rows = ok.select([c for c in ("id", "kind", "status", "median_us", "probe_us") if c in ok.columns]).to_dicts()
    worst = spread.worst_ratios(r for r in rows if r["kind"] != "baseline")
    if timed:
        bar = timed_base["median_us"].min()
        best_id = spread.choice(rows)
    else:
        bar = None
        cand_ok = ok.filter(pl.col("kind") == "candidate").sort("predicted_us", maintain_order=True)
        best_id = cand_ok["id"][0] if cand_ok.height else (base["id"][0] if base.height else None)
    verdict = (
        pl.when(pl.col("id").eq_missing(pl.lit(best_id, dtype=pl.Utf8))).then(pl.lit("selected"))
        .when(pl.col("status").is_null()).then(pl.lit("not measured"))
        .when(pl.col("status") != "ok").then(pl.col("status").replace(VERDICTS))
        .when(pl.lit(bar is not None) & (pl.col("kind") == "candidate") & (pl.col("median_us") > (bar or 0.0)))
        .then(pl.lit("performance"))
        .otherwise(pl.lit("slower" if timed else "correct"))
    )
    df = df.with_columns(
        verdict.alias("verdict"),
        (pl.lit(eager) / pl.col("median_us")).alias("speedup_vs_eager"),
        (pl.lit(comp) / pl.col("median_us")).alias("speedup_vs_compile"),
        pl.col("id").replace_strict(worst, default=None, return_dtype=pl.Float64).alias("bucket_worst"),
    )
    return df, best_id, timed


def select(key: str, program: Program, bdir: Path, cache_dir: Any, graph: Callable[[], Any], phase1: float,
           phase2: float, hit: bool) -> Result:
    """The run's Result from the tables (its newest candidates and observations) and the bundle's manifest."""
    df, best_id, timed = choose(*latest(key, cache_dir))
    if best_id is None:
        errors = df["error"].drop_nulls() if "error" in df.columns else []
        first = f"; the first error: {str(errors[0]).strip().splitlines()[-1]}" if len(errors) else ""
        err = PipelineError(f"{program.name}: no candidate and no baseline ran correctly; see the table "
                            f"(cache key {key}, bundle {bdir}){first}")
        err.table = df
        raise err
    return Result(kernel_of(df, best_id, program, bdir), df, key, hit, phase1, phase2, timed, bdir, graph)


def kernel_of(table: pl.DataFrame, kernel_id: str, program: Program, bdir: Path) -> BestKernel:
    """The callable kernel of one row of a run's table (the selection's, or any other measured one)."""
    row = table.filter(pl.col("id") == kernel_id).row(0, named=True)
    entry = next((c["entry"] for c in manifest(bdir) if c["id"] == kernel_id), "kernel")
    mode = next((c.get("mode", "dps") for c in manifest(bdir) if c["id"] == kernel_id), "dps")
    return BestKernel(kernel_id, row["kind"], Path(row["source"]), entry, mode, program, str(row.get("hw") or ""))


def from_cache(key: str, program: Program, bdir: Path, cache_dir: Any, graph: Callable[[], Any],
               phase1: float) -> Result | None:
    """The stored choice when every candidate of the run has a final observation, else None."""
    cands, meas = latest(key, cache_dir)
    if cands.is_empty() or not (bdir / "manifest.json").exists():
        return None
    if not set(cands["id"]) <= set(meas.filter(pl.col("final"))["id"]):
        return None
    if not all(Path(p).exists() for p in cands["source"].drop_nulls()):
        return None
    result = select(key, program, bdir, cache_dir, graph, phase1, 0.0, hit=True)
    result.reused = tuple(sorted(cands["id"]))
    return result


__all__ = ["from_cache", "VERDICTS", "choose", "kernel_of", "select"]
