"""A shape-generic candidate's standing over the sizes of its bucket (``axon_eg.buckets``), from its rows:
standard library only, so that a benchmark on a bare GPU box chooses as :mod:`axon_eg.selection` does.

A bucket's candidates are timed at its tuned size (``median_us``) and at its other probe sizes
(``probe_us``, JSON ``{"M=2": 11.5, ...}``). Each is scored by its worst ratio: the largest, over those
sizes, of its time there over the fastest candidate's time there. The candidate with the smallest worst
ratio is the one that is never far from the best at any size measured (at its tuned size alone a bucket
tuned at M = 128 would pick a tile that wastes most of the work at M = 17).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any


def times(row: Mapping[str, Any]) -> dict[str, float]:
    """The row's latency per size: ``""`` for its tuned size, then each probe's label."""
    out = {"": float(row["median_us"])} if row.get("median_us") is not None else {}
    probes = row.get("probe_us")
    if probes:
        out.update({k: float(v) for k, v in json.loads(probes).items() if v is not None})
    return out


def worst_ratios(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """id -> the candidate's worst ratio (module docstring) over the rows that were timed at probe sizes
    (``probe_us`` with a time) and at every size any of them was timed at; rows without probes get none."""
    timed = {r["id"]: t for r in rows if r.get("median_us") is not None and len(t := times(r)) > 1}
    sizes = set().union(*timed.values()) if timed else set()
    complete = {i: t for i, t in timed.items() if set(t) == sizes}
    best = {s: min(t[s] for t in complete.values()) for s in sizes} if complete else {}
    return {i: max(t[s] / best[s] for s in sizes) for i, t in complete.items()}


def choice(rows: Iterable[Mapping[str, Any]]) -> str | None:
    """The id :mod:`axon_eg.selection` chooses among correct timed rows (``status == "ok"``): the candidate
    with the smallest worst ratio (ties: the faster at the tuned size), unless a row without probes (a
    baseline, or every row of a bucket of one size) is faster at the tuned size; else the fastest row."""
    ok = [r for r in rows if r.get("status") == "ok" and r.get("median_us") is not None]
    if not ok:
        return None
    fastest = min(ok, key=lambda r: r["median_us"])
    scores = worst_ratios(r for r in ok if r.get("kind") != "baseline")
    if not scores:
        return fastest["id"]
    at = {r["id"]: r for r in ok}
    pick = min(scores, key=lambda i: (round(scores[i], 3), at[i]["median_us"]))
    others = [r for r in ok if r["id"] not in scores and r["median_us"] < at[pick]["median_us"]]
    return min(others, key=lambda r: r["median_us"])["id"] if others else pick


__all__ = ["choice", "times", "worst_ratios"]
