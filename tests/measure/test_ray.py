"""The Ray path on a local 2-CPU cluster: same statuses as the local path, resumable, driven from the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from axon_eg.measure.manifest import read_rows
from axon_eg.measure.worker import run_bundle

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'axon_eg[ray]')")

SPECS = [{"name": "x", "shape": [4, 8], "dtype": "fp32"}, {"name": "y", "shape": [4, 8], "dtype": "fp32"}]
CANDIDATES = {
    "good": "import torch\ndef kernel(x, y, out):\n    torch.add(x, y, out=out)\n",
    "wrong": "import torch\ndef kernel(x, y, out):\n    torch.sub(x, y, out=out)\n",
    "syntax": "def kernel(x, y, out)\n    pass\n",
}
EXPECTED = {"good": ("ok", "done"), "wrong": ("wrong_result", "correctness"), "syntax": ("syntax_error", "syntax")}


def make_bundle(root):
    (root / "kernels").mkdir(parents=True)
    (root / "ref.py").write_text("def ref(x, y):\n    return x + y\n")
    manifest = []
    for cid, src in CANDIDATES.items():
        (root / "kernels" / f"{cid}.py").write_text(src)
        manifest.append({"id": cid, "source": f"kernels/{cid}.py", "entry": "kernel", "inputs": SPECS,
                         "reference": "ref.py:ref", "kind": "candidate", "timeout_s": 30})
    (root / "manifest.json").write_text(json.dumps({"program": "add", "candidates": manifest}))
    return root


@pytest.mark.slow
def test_ray_local_cluster_matches_local_path_and_resumes(tmp_path):
    bundle = make_bundle(tmp_path / "b")
    out = tmp_path / "ray.jsonl"
    (local_wrong,) = run_bundle(bundle, out, gpus=[], ids=["wrong"])  # already done: the Ray run must skip it
    env = {**os.environ, "AXON_EG_FORCE_CPU": "1"}
    proc = subprocess.run([sys.executable, "-m", "axon_eg.measure", str(bundle), "--out", str(out), "--ray", "local"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["new_rows"] == 2
    rows = {r["id"]: r for r in read_rows(out)}
    assert len(read_rows(out)) == 3 and rows["wrong"] == local_wrong
    local = {r["id"]: r for r in run_bundle(bundle, tmp_path / "local.jsonl", gpus=[], ids=["good", "syntax"])}
    local["wrong"] = local_wrong
    for cid, r in rows.items():
        assert (r["status"], r["stage"]) == EXPECTED[cid] == (local[cid]["status"], local[cid]["stage"])
        assert r["kind"] == "candidate" and r["program"] == "add"
    assert rows["good"]["error"] is None and rows["good"]["max_abs_err"] <= 1e-6 and rows["good"]["device"].startswith("cpu")


def test_ray_runner_in_process_reuses_an_open_connection_and_skips_done_work(tmp_path, monkeypatch):
    from axon_eg.measure import ray_runner

    bundle = make_bundle(tmp_path / "b")
    out = tmp_path / "o.jsonl"
    run_bundle(bundle, out, gpus=[], ids=["syntax"])
    calls = []
    monkeypatch.setattr(ray_runner, "_init", lambda *a: calls.append(a))
    assert ray_runner.run_bundle_ray(bundle, out, "local", ids=["syntax"]) == []  # nothing left: Ray never started
    assert calls == [] and not ray.is_initialized()
    payload = ray_runner.pack_candidate(bundle, {"id": "good", "source": "kernels/good.py", "reference": "ref.py:ref"})
    assert set(payload["files"]) == {"kernels/good.py", "ref.py"}
