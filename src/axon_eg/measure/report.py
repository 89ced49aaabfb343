"""Markdown report (and optional plots) of the result tables: best candidate vs the torch baselines.

``report(cache_dir, program)`` returns one Markdown section per (program, hw, cache_key): the best
correct candidate (lowest median latency), the ``torch_eager`` and ``torch_compile`` baselines (rows with
``kind == "baseline"``), the best candidate's speedup over each, and how many candidates ended in each
status. Data measured on the CPU has no latencies; its sections say "correctness only (no GPU timings)".
A candidate measured more than once counts with its latest row. With ``plot_dir`` it also saves
``predicted_vs_measured.png`` and ``latency_distribution.png`` (matplotlib, Agg backend).

The rest is the ``axon-eg optimize`` result on the terminal: ``terminal_table`` (a ``rich`` table that fits
the width: columns without a value left out, long cells cut with an ellipsis), ``selection_line`` (why the
selected row won, ties included, stating the rule of ``pipeline``'s selection), ``baseline_line`` (the plain
last line when a baseline won) and ``markdown_table`` (``report.md``'s table, every cell in full).

Polars, rich and matplotlib are imported lazily: this module is not part of the bare-GPU-box worker.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from axon_eg.measure.manifest import STATUSES

if TYPE_CHECKING:
    import polars as pl

BASELINES = {"torch_eager": "torch eager", "torch_compile": "torch.compile",
             "torch_compile_default": "torch.compile (default mode)"}
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

    from axon_eg.measure import part_store, tables  # lazy: the tables load polars; the CLI imports this module

    m = tables.results(cache_dir).collect()
    if program is not None:
        m = m.filter(pl.col("program") == program)
    where = part_store.cache_dir(cache_dir)
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
    colors = {"torch_eager": "tab:red", "torch_compile": "tab:green", "torch_compile_default": "tab:olive"}
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


# ------------------------------------------------------------------------------------------------
# The ``axon-eg optimize`` result: a terminal table, the line on why the selected row won, and the
# plain last line when a baseline won. ``df`` is ``Result.table`` (one row per candidate and baseline,
# with ``verdict``); rich is imported lazily.

TIE = 0.01
"""Relative distance within which two latencies (or predictions) are reported as a tie."""
LONG_COLUMNS = ("plan", "lowering", "error")
"""Columns cut with an ellipsis to fit the terminal; given up in this order when fewer than ``MIN_LONG`` characters
are left for each, or fewer than ``ERROR_MIN`` for the error."""
SHORT_HEADERS = {"predicted_us": "pred_us", "speedup_vs_eager": "x_eager", "speedup_vs_compile": "x_compile",
                 "max_abs_err": "max_err"}
"""Terminal headers for the widest column names (``table.parquet`` and ``report.md`` keep the full names)."""
NUMERIC = ("predicted_us", "median_us", "iqr_us", "speedup_vs_eager", "speedup_vs_compile", "max_abs_err")
MIN_LONG = 8
ERROR_MIN = 24


def cell(v: Any) -> str:
    """A value on one terminal line: floats to 4 significant digits, None empty, text by its last non-empty
    line (a traceback's exception line)."""
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if v != v else f"{v:.4g}"
    lines = [ln.strip() for ln in str(v).splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def filled_columns(df: pl.DataFrame, columns: Sequence[str]) -> list[str]:
    """The ``columns`` of ``df`` that have a value in some row (on the CPU the latencies and speedups have none)."""
    return [c for c in columns if c in df.columns and any(cell(v) for v in df[c].to_list())]


def _share(room: int, wants: list[int]) -> list[int]:
    """Split ``room`` characters among columns wanting ``wants``: none gets more than it wants, the rest evenly."""
    got = [0] * len(wants)
    left = sorted(range(len(wants)), key=lambda i: wants[i])
    while left:
        fair = room // len(left)
        i = left.pop(0)
        got[i] = min(wants[i], fair)
        room -= got[i]
    return got


def terminal_table(df: pl.DataFrame, columns: Sequence[str], selected: str | None, width: int) -> Any:
    """A ``rich.table.Table`` of ``df`` that fits ``width`` characters: columns without a value are left out,
    every row stays on one line (``plan``, ``lowering`` and ``error`` are cut with an ellipsis, and given up in
    that order when too little room is left, see ``LONG_COLUMNS``), the ``selected`` row is bold green."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    cols = filled_columns(df, columns)
    cells = {c: [cell(v) for v in df[c].to_list()] for c in cols}
    head = {c: SHORT_HEADERS.get(c, c) for c in cols}
    want = {c: max([len(head[c]), *map(len, cells[c])]) for c in cols}
    long = [c for c in cols if c in LONG_COLUMNS]
    while True:  # two spaces between columns (collapse_padding), none at the edges
        room = width - 2 * (len(cols) - 1) - sum(want[c] for c in cols if c not in long)
        caps = dict(zip(long, _share(room, [want[c] for c in long])))
        starved = "error" in caps and len(long) > 1 and caps["error"] < min(ERROR_MIN, want["error"])
        if not long or (room >= MIN_LONG * len(long) and not starved):
            break
        victim = next(c for c in LONG_COLUMNS if c in long)
        long.remove(victim)
        cols.remove(victim)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for c in cols:
        table.add_column(head[c], justify="right" if c in NUMERIC else "left", no_wrap=True, overflow="ellipsis",
                         min_width=None if c in long else want[c], max_width=caps.get(c))
    ids = df["id"].to_list() if "id" in df.columns else [None] * df.height
    for i, rid in enumerate(ids):
        table.add_row(*(Text(cells[c][i]) for c in cols), style="bold green" if rid == selected and rid else None)
    return table


def markdown_table(df: pl.DataFrame) -> str:
    """``df`` as a Markdown table with every cell in full (floats to 4 significant digits; ``|`` escaped and
    line breaks as ``<br>`` so a traceback stays in its cell)."""

    def md(v: Any) -> str:
        if v is None:
            return ""
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v).strip().replace("|", "\\|").replace("\r", "").replace("\n", "<br>")

    head = "| " + " | ".join(df.columns) + " |"
    rule = "|" + "---|" * len(df.columns)
    return "\n".join([head, rule, *("| " + " | ".join(md(v) for v in row) + " |" for row in df.iter_rows())])


def _names(ids: Sequence[str], most: int = 4) -> str:
    ids = list(ids)
    if len(ids) > most:
        return ", ".join(ids[:most - 1]) + f" and {len(ids) - most + 1} more"
    return ids[0] if len(ids) == 1 else ", ".join(ids[:-1]) + " and " + ids[-1]


def _row(df: pl.DataFrame, rid: str) -> dict[str, Any]:
    import polars as pl

    return df.filter(pl.col("id") == rid).row(0, named=True)


def selection_line(df: pl.DataFrame, best: str, timed: bool) -> str:
    """One line on why ``best`` was selected, stating the rule ``selection.select`` applies: on a GPU the
    correct row (candidate or baseline) with the lowest median latency, nothing else breaking ties; without
    timings the correct candidate with the lowest predicted cost (a baseline only when no candidate is
    correct), equal predictions going to the row first in the table (candidates are in rank order)."""
    import polars as pl

    row = _row(df, best)
    name = f"{best} (a baseline)" if row["kind"] == "baseline" else best
    cands = df.filter(pl.col("kind") != "baseline")
    ok_c = cands.filter(pl.col("status") == "ok")
    if not timed:
        if row["kind"] == "baseline":
            return f"correctness only: {name} selected: none of the {cands.height} candidates ran correctly"
        if ok_c.height == 1:
            return f"correctness only: {best} selected: the only correct candidate of {cands.height}"
        p = row["predicted_us"]
        line = (f"correctness only: {best} selected by the lowest predicted cost ({_us(p)} us) among {ok_c.height} "
                "correct candidates")
        if p is None:
            return line
        ties = ok_c.filter((pl.col("id") != best) & (pl.col("predicted_us") <= p * (1 + TIE)))
        if ties.is_empty():
            return line
        equal = ties.filter(pl.col("predicted_us") == p)
        near = ties.filter(pl.col("predicted_us") != p)
        said, rules = [], []
        if equal.height:
            earlier = row["rank"] is not None and all(r is not None and r > row["rank"] for r in equal["rank"])
            said.append(f"{_names(equal['id'].to_list())} {'predicts' if equal.height == 1 else 'predict'} the same")
            rules.append("equal predictions go to the " + ("earlier rank" if earlier else "row first in the table"))
        if near.height:
            said.append(f"{_names(near['id'].to_list())} {'is' if near.height == 1 else 'are'} within {TIE:.0%}")
            rules.insert(0, "the lowest prediction wins")
        return f"{line}; {' and '.join(said)} — {', '.join(rules)}"
    m = row["median_us"]
    timed_ok = df.filter((pl.col("status") == "ok") & pl.col("median_us").is_not_null())
    line = f"{name} selected: fastest correct ({_us(m)} us median, of {timed_ok.height} correct)"
    others = timed_ok.filter(pl.col("id") != best).sort("median_us")
    if m is None or others.is_empty():
        return line
    ties = others.filter(pl.col("median_us") <= m * (1 + TIE))
    if ties.is_empty():
        nxt = others.row(0, named=True)
        return f"{line}; next {nxt['id']} at {_us(nxt['median_us'])} us"
    listed = [f"{r['id']} ({_us(r['median_us'])} us)" for r in ties.iter_rows(named=True)]
    rule = "the lowest median wins, predicted cost breaks no ties"
    if (ties["median_us"] == m).any():
        rule += "; equal medians go to the row first in the table (baselines, then candidates by rank)"
    return f"{line}; {_names(listed)} within {TIE:.0%} — {rule}"


def failures(df: pl.DataFrame) -> tuple[int, int, str]:
    """(candidates that did not run correctly, candidates, ``"3 timeout, 2 wrong_result"``)."""
    import polars as pl

    cands = df.filter(pl.col("kind") != "baseline")
    bad = cands.filter(pl.col("status").is_null() | (pl.col("status") != "ok"))
    status = bad["status"].fill_null("not measured").replace({"skipped": "skipped (budget)"}).to_list()
    counts: dict[str, int] = {}
    for s in status:
        counts[s] = counts.get(s, 0) + 1
    order = sorted(counts, key=lambda s: (-counts[s], STATUSES.index(s) if s in STATUSES else len(STATUSES), s))
    return bad.height, cands.height, ", ".join(f"{counts[s]} {s}" for s in order)


def baseline_line(df: pl.DataFrame, best: str) -> str | None:
    """The plain last line of a run whose best is a baseline (None when it is a candidate), e.g.
    ``best: torch_eager (a baseline): no candidate ran correctly — 2 of 2 candidates failed: 2 timeout``."""
    import polars as pl

    row = _row(df, best)
    if row["kind"] != "baseline":
        return None
    n_bad, n, counts = failures(df)
    ok_c = df.filter((pl.col("kind") != "baseline") & (pl.col("status") == "ok"))
    if n == 0:
        why = "there were no candidates"
    elif ok_c.is_empty():
        why = "no candidate ran correctly"
    else:
        fastest = ok_c.sort("median_us", nulls_last=True).row(0, named=True)
        why = (f"no correct candidate was faster (the fastest, {fastest['id']}, took {_us(fastest['median_us'])} us "
               f"against {_us(row['median_us'])} us)")
    tail = f"{n_bad} of {n} candidates failed: {counts}" if n_bad else f"all {n} candidates ran correctly"
    return f"best: {best} (a baseline): {why} — {tail}" if n else f"best: {best} (a baseline): {why}"
