"""Markdown report (and optional plots) of the result tables: best candidate vs the torch baselines.

``report(cache_dir, program)`` returns one Markdown section per (program, hw, cache_key): the best
correct candidate (lowest median latency), the ``torch_eager`` and ``torch_compile`` baselines (rows with
``kind == "baseline"``), the best candidate's speedup over each, and how many candidates ended in each
status. Data measured on the CPU has no latencies; its sections say "correctness only (no GPU timings)".
A candidate measured more than once counts with its latest row. With ``plot_dir`` it also saves
``predicted_vs_measured.png`` and ``latency_distribution.png`` (matplotlib, Agg backend).

Polars and matplotlib are imported lazily: this module is not part of the bare-GPU-box worker.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from axon_eg.measure.worker import STATUSES

if TYPE_CHECKING:
    import polars as pl

BASELINES = {"torch_eager": "torch eager", "torch_compile": "torch.compile"}
"""Baseline ids (rows with ``kind == "baseline"``) and how the report names them."""
GROUP = ("program", "hw", "cache_key")
NO_TIMINGS = "correctness only (no GPU timings)"


def _us(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" if v < 100 else f"{v:.1f}"


def _name(v: Any) -> str:
    return "-" if v is None else str(v)


def latest(df: pl.DataFrame) -> pl.DataFrame:
    """One row per (program, hw, cache_key, id): the latest by timestamp; ``hw`` falls back to ``device``,
    ``kind`` to ``"candidate"``."""
    import polars as pl

    df = df.with_columns(hw=pl.coalesce("hw", "device"), kind=pl.col("kind").fill_null("candidate"))
    return df.sort("timestamp", nulls_last=False).unique(subset=[*GROUP, "id"], keep="last", maintain_order=True)


def _status_table(cands: pl.DataFrame) -> list[str]:
    import polars as pl

    counts = dict(cands.group_by("status").len().iter_rows())
    order = [s for s in STATUSES if s in counts] + sorted(s for s in counts if s not in STATUSES)
    lines = ["| status | candidates | e.g. |", "|---|---:|---|"]
    for s in order:
        ids = cands.filter(pl.col("status") == s).get_column("id").sort().head(3).to_list()
        lines.append(f"| {s} | {counts[s]} | {', '.join(ids)} |")
    return lines


def _section(key: Sequence[Any], g: pl.DataFrame) -> str:
    import polars as pl

    program, hw, cache_key = key
    out = [f"### `{_name(program)}` on {_name(hw)} (cache_key `{_name(cache_key)}`)", ""]
    cands = g.filter(pl.col("kind") != "baseline")
    base = g.filter(pl.col("kind") == "baseline")
    timed = cands.filter((pl.col("status") == "ok") & pl.col("median_us").is_not_null()).sort("median_us")
    if timed.is_empty():
        out += [NO_TIMINGS, ""]
        n_ok = cands.filter(pl.col("status") == "ok").height
        out.append(f"{n_ok} of {cands.height} candidates correct.")
        for bid, label in BASELINES.items():
            b = base.filter(pl.col("id") == bid)
            out.append(f"{label}: {b['status'][0] if b.height else 'not measured'}.")
        out.append("")
    else:
        best_id, best_us = timed.row(0, named=True)["id"], timed.row(0, named=True)["median_us"]
        out += ["| | id | median_us | best candidate's speedup |", "|---|---|---:|---:|",
                f"| best candidate | {best_id} | {_us(best_us)} | |"]
        for bid, label in BASELINES.items():
            b = base.filter(pl.col("id") == bid)
            if b.is_empty():
                out.append(f"| {label} | - | not measured | - |")
                continue
            row = b.row(0, named=True)
            if row["status"] != "ok" or row["median_us"] is None:
                out.append(f"| {label} | {bid} | {row['status']} | - |")
                continue
            out.append(f"| {label} | {bid} | {_us(row['median_us'])} | {row['median_us'] / best_us:.2f}x |")
        out.append("")
    out += [*_status_table(cands), ""]
    return "\n".join(out)


def report(cache_dir: str | os.PathLike[str] | None = None, program: str | None = None, *,
           plot_dir: str | os.PathLike[str] | None = None) -> str:
    """Markdown summary of the ``measurements`` table (optionally one ``program``); see the module docstring."""
    import polars as pl

    from axon_eg.measure import tables

    m = tables.results(cache_dir).collect()
    if program is not None:
        m = m.filter(pl.col("program") == program)
    where = tables.cache_dir(cache_dir)
    if m.is_empty():
        return f"No measurements{f' of program {program!r}' if program else ''} in {where}."
    m = latest(m)
    keys = m.select(GROUP).unique(maintain_order=True).sort(GROUP, nulls_last=True).rows()
    parts = [f"## Measurements ({where})", ""]
    for key in keys:
        match = pl.all_horizontal([pl.col(c).eq_missing(v) for c, v in zip(GROUP, key)])
        parts.append(_section(key, m.filter(match)))
    if plot_dir is not None:
        cands = tables.results(cache_dir, "candidates").collect()
        parts.append(plot(m, cands, Path(plot_dir)))
    return "\n".join(parts).rstrip() + "\n"


def _timed_candidates(m: pl.DataFrame, cands: pl.DataFrame) -> pl.DataFrame:
    """Correct, timed candidates with their predicted latency (candidates table first, else the row's own)."""
    import polars as pl

    timed = m.filter((pl.col("kind") != "baseline") & (pl.col("status") == "ok") & pl.col("median_us").is_not_null())
    pred = cands.select("cache_key", "id", pl.col("predicted_us").alias("predicted_static"))
    pred = pred.unique(subset=["cache_key", "id"], keep="last")
    return (timed.join(pred, on=["cache_key", "id"], how="left", nulls_equal=True)
            .with_columns(predicted=pl.coalesce("predicted_static", "predicted_us"),
                          label=pl.concat_str([pl.col("program").fill_null("-"), pl.col("hw").fill_null("-")],
                                              separator=" @ ")))


def _spearman(df: pl.DataFrame) -> float | None:
    import polars as pl

    if df.height < 2:
        return None
    rho = df.select(pl.corr("predicted", "median_us", method="spearman")).item()
    return None if rho is None or rho != rho else float(rho)


def plot(m: pl.DataFrame, cands: pl.DataFrame, plot_dir: Path) -> str:
    """Save the two plots into ``plot_dir``; returns a Markdown line naming them (or why none were made)."""
    import polars as pl
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogFormatter

    def plain_log(axis: Any) -> None:  # 20, not 2 x 10^1; minor labels only when the axis spans few decades
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1.5, 0.5)))

    timed = _timed_candidates(m, cands)
    if timed.is_empty():
        return f"Plots skipped: {NO_TIMINGS}.\n"
    plot_dir.mkdir(parents=True, exist_ok=True)
    paths = []

    fig = Figure(figsize=(6, 5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    pv = timed.filter(pl.col("predicted") > 0)
    for (label,), g in pv.group_by("label", maintain_order=True):
        rho = _spearman(g)
        ax.scatter(g["predicted"].to_list(), g["median_us"].to_list(), s=14, alpha=0.8,
                   label=f"{label} (rho {rho:.2f})" if rho is not None else label)
    rho = _spearman(pv)
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_log(ax.xaxis)
    plain_log(ax.yaxis)
    ax.set_xlabel("predicted latency (us)")
    ax.set_ylabel("measured median latency (us)")
    ax.set_title(f"predicted vs measured: Spearman rho = {'n/a' if rho is None else f'{rho:.3f}'} (n={pv.height})")
    if pv.height:
        lo, hi = min(pv["predicted"].min(), pv["median_us"].min()), max(pv["predicted"].max(), pv["median_us"].max())
        ax.plot([lo, hi], [lo, hi], color="grey", linewidth=0.8, linestyle="--")
        ax.legend(fontsize=7)
    paths.append(plot_dir / "predicted_vs_measured.png")
    fig.savefig(paths[-1], dpi=120, bbox_inches="tight")

    fig = Figure(figsize=(max(4, 1.6 * timed["label"].n_unique()), 5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    labels = sorted(timed["label"].unique().to_list())
    base = m.filter((pl.col("kind") == "baseline") & (pl.col("status") == "ok") & pl.col("median_us").is_not_null())
    base = base.with_columns(label=pl.concat_str([pl.col("program").fill_null("-"), pl.col("hw").fill_null("-")],
                                                 separator=" @ "))
    colors = {"torch_eager": "tab:red", "torch_compile": "tab:green"}
    in_legend: set[str] = set()
    for i, label in enumerate(labels):
        ys = timed.filter(pl.col("label") == label)["median_us"].to_list()
        xs = [i + 0.3 * ((k * 0.618) % 1.0 - 0.5) for k in range(len(ys))]  # deterministic jitter
        ax.scatter(xs, ys, s=12, alpha=0.7, color="tab:blue", label="candidates" if i == 0 else None)
        for bid, color in colors.items():
            b = base.filter((pl.col("label") == label) & (pl.col("id") == bid))
            if b.height:
                ax.hlines(b["median_us"][-1], i - 0.4, i + 0.4, colors=color, linewidth=2,
                          label=None if bid in in_legend else BASELINES[bid])
                in_legend.add(bid)
    ax.set_xticks(range(len(labels)), labels, rotation=20, fontsize=8)
    ax.set_yscale("log")
    plain_log(ax.yaxis)
    ax.set_ylabel("median latency (us)")
    ax.set_title("candidate latencies (lines: baselines)")
    ax.legend(fontsize=7)
    paths.append(plot_dir / "latency_distribution.png")
    fig.savefig(paths[-1], dpi=120, bbox_inches="tight")
    rho_text = "n/a" if rho is None else f"{rho:.3f}"
    return (f"Spearman rho, predicted vs measured: {rho_text} (n = {pv.height} candidates with a prediction).\n\n"
            "Plots: " + ", ".join(str(p) for p in paths) + "\n")
