"""A shape bucket is measured over its sizes, not only at its tuned end: probes in the bundle (checked and
timed by the worker), tilings ranked at the bucket's other sizes joining its candidates, and the choice by
worst ratio (``measure.spread``, ``selection.choose``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
from benchmarks import suite
from hypothesis import given, settings
from hypothesis import strategies as st

from axon_eg import pipeline
from axon_eg.buckets import probe_bindings
from axon_eg.measure import spread
from axon_eg.measure.manifest import read_rows
from axon_eg.selection import choose

ENV = {**os.environ, "AXON_EG_FORCE_CPU": "1"}

times = st.floats(min_value=1.0, max_value=1000.0, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 3), st.data())
def test_the_choice_has_the_smallest_worst_ratio(n, sizes, data):
    labels = [f"M={k}" for k in range(1, sizes)]
    rows = [{"id": f"c{i}", "kind": "candidate", "status": "ok", "median_us": data.draw(times),
             "probe_us": json.dumps({lab: data.draw(times) for lab in labels}) if labels else json.dumps({})}
            for i in range(n)]
    worst = spread.worst_ratios(rows)
    if not labels:  # an empty probe set is no probe: the fastest at the tuned size
        assert worst == {} and spread.choice(rows) == min(rows, key=lambda r: r["median_us"])["id"]
        return
    if n == 1:
        assert worst == {"c0": 1.0}  # alone, it is the fastest at every size
    pick = spread.choice(rows)
    assert all(round(worst[pick], 3) <= round(w, 3) for w in worst.values())
    for r in rows:  # the ratio is the worst over the sizes, each against the fastest there
        t = spread.times(r)
        assert worst[r["id"]] == max(t[s] / min(spread.times(o)[s] for o in rows) for s in t)
    # a baseline (no probes) faster than the pick at the tuned size is selected; a slower one is not
    fast = {"id": "torch_eager", "kind": "baseline", "status": "ok", "median_us": 0.5}
    slow = {**fast, "median_us": 2000.0}
    assert spread.choice([*rows, fast]) == "torch_eager" and spread.choice([*rows, slow]) == pick
    # a candidate that failed at a probe size (not ok) is not chosen
    failed = {**next(r for r in rows if r["id"] == pick), "status": "wrong_result"}
    assert spread.choice([r if r["id"] != pick else failed for r in rows]) != pick


def test_choose_reports_the_worst_ratio_and_picks_the_steady_candidate():
    cands = pl.DataFrame({"id": ["big_tile", "small_tile", "torch_eager"], "kind": ["candidate", "candidate", "baseline"],
                          "rank": [0, 1, None], "predicted_us": [10.0, 11.0, None]})
    meas = pl.DataFrame({"id": ["big_tile", "small_tile", "torch_eager"], "status": ["ok", "ok", "ok"],
                         "median_us": [38.0, 40.0, 90.0],
                         "probe_us": [json.dumps({"M=17": 38.0, "M=47": 38.5}), json.dumps({"M=17": 26.0, "M=47": 27.0}),
                                      None]})
    df, best, timed = choose(cands, meas)
    assert timed and best == "small_tile"  # 40/38 at M=128 beats 38/26 at M=17
    worst = dict(df.select("id", "bucket_worst").iter_rows())
    assert abs(worst["big_tile"] - 38 / 26) < 1e-9 and abs(worst["small_tile"] - 40 / 38) < 1e-9
    assert worst["torch_eager"] is None


def test_probe_bindings_are_the_low_end_and_the_middle():
    assert probe_bindings({"M": (17, 128)}) == [{"M": 17}, {"M": 47}]
    assert probe_bindings({"M": (2, 3)}) == [{"M": 2}]  # the middle rounds to an end
    assert probe_bindings({"M": (5, 5)}) == []
    assert probe_bindings({"M": (2, 16), "N": (8, 8)}) == [{"M": 2}, {"M": 6}]


WRONG_BELOW_4 = """import torch
def kernel(x, y, out):
    out.copy_(x + y if x.shape[0] >= 4 else x - y)
"""


def test_a_kernel_wrong_only_at_the_low_end_of_its_bucket_is_rejected_there(tmp_path):
    root = tmp_path / "b"
    root.mkdir()
    (root / "ref.py").write_text("def ref(x, y):\n    return x + y\n")
    specs = lambda m: [{"name": n, "shape": [m, 8], "dtype": "fp32"} for n in ("x", "y")]  # noqa: E731
    probes = [{"label": f"M={m}", "inputs": specs(m), "reference": "ref.py:ref"} for m in (2, 5)]
    cands = {"steady": "import torch\ndef kernel(x, y, out):\n    torch.add(x, y, out=out)\n", "small_m_bug": WRONG_BELOW_4}
    manifest = []
    for cid, src in cands.items():
        (root / f"{cid}.py").write_text(src)
        manifest.append({"id": cid, "source": f"{cid}.py", "entry": "kernel", "inputs": specs(9),
                         "reference": "ref.py:ref", "probes": probes, "kind": "candidate"})
    (root / "manifest.json").write_text(json.dumps({"candidates": manifest}))
    out = tmp_path / "rows.jsonl"
    proc = subprocess.run([sys.executable, "-m", "axon_eg.measure", str(root), "--out", str(out), "--cpu"], env=ENV,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = {r["id"]: r for r in read_rows(out)}
    assert rows["steady"]["status"] == "ok" and json.loads(rows["steady"]["probe_us"]) == {"M=2": None, "M=5": None}
    bug = rows["small_m_bug"]
    assert (bug["status"], bug["stage"]) == ("wrong_result", "correctness") and bug["error"].startswith("at M=2:")


def test_a_buckets_candidates_include_tilings_ranked_at_its_other_sizes(tmp_path):
    """On a GPU run (phase 1 only here), the k best at M=17 and M=47 join the k best at M=128, each shape-generic
    over the whole bucket, no kernel twice, and every one is checked and timed at the probe sizes."""
    program = suite.get("matmul_bias_gelu").program.bind(K=4096, N=4096, M=128)
    bdir = pipeline.write_bundle_only(program, k=2, cache_dir=tmp_path, device="cuda", saturation_s=0.5,
                                      ranges={"M": (17, 128)})
    rows = json.loads((bdir / "candidates.json").read_text())
    cands = [r for r in rows if r["kind"] == "candidate"]
    tuned_at = {r.get("tuned_at") for r in cands}
    assert None in tuned_at and tuned_at - {None} <= {"M=17", "M=47"} and len(tuned_at) > 1, tuned_at
    assert {json.dumps(json.loads(r["tilings"])[0], sort_keys=True) for r in cands if r.get("tuned_at")} - \
        {json.dumps(json.loads(r["tilings"])[0], sort_keys=True) for r in cands if not r.get("tuned_at")}, \
        "a tiling the tuned size does not rank first"
    manifest = json.loads((bdir / "manifest.json").read_text())["candidates"]
    sources = [Path(bdir / e["source"]).read_text() for e in manifest if e["kind"] == "candidate"]
    assert len(sources) == len(set(s[s.index("\nimport math"):] for s in sources))
    for e in manifest:
        if e["kind"] == "candidate":
            assert [p["label"] for p in e["probes"]] == ["M=17", "M=47"]
            assert "SIZES = {'M': (17, 128)}" in (bdir / e["source"]).read_text()
        else:
            assert "probes" not in e
