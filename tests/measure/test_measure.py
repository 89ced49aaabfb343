"""The measurement layer on CPU: planted bad candidates, kill-and-resume, concurrent table writers, isolation."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from axon_eg.measure import harness, part_store, table_schemas, tables
from axon_eg.measure.manifest import read_rows
from axon_eg.measure.worker import run_bundle

PY = sys.executable
ENV = {**os.environ, "AXON_EG_FORCE_CPU": "1"}

SPECS = [{"name": "x", "shape": [4, 8], "dtype": "fp32"}, {"name": "y", "shape": [4, 8], "dtype": "fp32"}]

TRITON_ADD = """import torch
import triton
import triton.language as tl


@triton.jit
def _add(x, y, o, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    {store}


def kernel(x, y, out):
    _add[(triton.cdiv(out.numel(), {block}),)](x, y, out, out.numel(), BLOCK={block})
"""
LIMITS = {"smem_bytes": 232448, "max_warps": 32, "max_block_elems": 1048576, "regs_per_thread": 255}
EXTRA = {
    "smem": {"resources": {"smem_bytes": 262144, "max_warps": 8, "launch": "_k0"}},
    "good": {"resources": {"smem_bytes": 232448, "max_warps": 32}, "kind": "candidate", "meta": {"predicted_us": 3.5}},
    "good_return": {"kind": "baseline"},
}

CANDIDATES = {
    "good": "import torch\ndef kernel(x, y, out):\n    torch.add(x, y, out=out)\n",
    "good_return": "def kernel(x, y):\n    return x + y\n",
    "syntax": "def kernel(x, y, out)\n    pass\n",
    "compile": "import not_a_module_axon\ndef kernel(x, y, out):\n    pass\n",
    "raises": "def kernel(x, y, out):\n    raise ValueError('planted')\n",
    "wrong": "import torch\ndef kernel(x, y, out):\n    torch.sub(x, y, out=out)\n",
    "nan": "def kernel(x, y, out):\n    out.copy_(x + y)\n    out[1, 2] = float('nan')\n",
    "loop": "def kernel(x, y, out):\n    while True:\n        pass\n",
    "segv": "import ctypes\ndef kernel(x, y, out):\n    ctypes.string_at(0)\n",
    "unwritten": "def kernel(x, y, out):\n    out[:, :-1] = (x + y)[:, :-1]\n",
    "mutates": "def kernel(x, y, out):\n    out.copy_(x + y)\n    x.mul_(2)\n",
    "oob": ("import torch\ndef kernel(x, y, out):\n    out.copy_(x + y)\n"
            "    torch.as_strided(out, (out.numel() + 8,), (1,))[out.numel():] = 1.0\n"),
    "smem": "import torch\ndef kernel(x, y, out):\n    torch.add(x, y, out=out)\n",  # correct, but too big
    "triton": TRITON_ADD.format(block=16, store="tl.store(o + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), "
                                                "mask=m)"),
    "triton_nomask": TRITON_ADD.format(block=64, store="tl.store(o + offs, tl.load(x + offs, mask=m, other=0.0) "
                                                       "+ tl.load(y + offs, mask=m, other=0.0))"),
}
EXPECTED = {
    "good": ("ok", "done"), "good_return": ("ok", "done"), "syntax": ("syntax_error", "syntax"),
    "compile": ("compile_error", "compile"), "raises": ("runtime_error", "run"),
    "wrong": ("wrong_result", "correctness"), "nan": ("wrong_result", "correctness"), "loop": ("timeout", "run"),
    "segv": ("crashed", "run"), "unwritten": ("wrong_result", "correctness"),
    "mutates": ("wrong_result", "correctness"), "oob": ("wrong_result", "correctness"),
    "smem": ("structure_error", "structure"), "triton": ("ok", "done"),
    "triton_nomask": ("wrong_result", "correctness"),
}


def make_bundle(root: Path, cands: dict[str, str], reference: str = "ref.py:ref", timeout: float = 20.0) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "ref.py").write_text("def ref(x, y):\n    return x + y\n")
    manifest = []
    for cid, src in cands.items():
        (root / f"{cid}.py").write_text(src)
        manifest.append({"id": cid, "source": f"{cid}.py", "entry": "kernel", "inputs": SPECS, "reference": reference,
                         "timeout_s": 2.0 if cid == "loop" else timeout, **EXTRA.get(cid, {})})
    header = {"limits": LIMITS, "cache_key": "k0", "program": "add", "hw": "cpu-test", "target": "triton"}
    (root / "manifest.json").write_text(json.dumps({**header, "candidates": manifest}))
    return root


def measured_on_cpu(bundle: Path, out: Path, env: dict | None = None) -> dict[str, dict]:
    """The worker run on ``bundle`` under the Triton interpreter in a fresh process: its rows by id."""
    proc = subprocess.run([PY, "-m", "axon_eg.measure", str(bundle), "--out", str(out), "--cpu"], env=env or ENV,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return {r["id"]: r for r in read_rows(out)}


# two halves, so that pytest-xdist can run them side by side; each candidate is one child process
GROUPS = {"failures": ["good", "good_return", "syntax", "compile", "raises", "wrong", "nan", "loop", "segv"],
          "gates": ["good", "unwritten", "mutates", "oob", "smem", "triton", "triton_nomask"]}
MESSAGES = {
    "raises": "planted", "segv": "SIGSEGV", "mutates": "mutated input 'x'", "unwritten": "NaN", "nan": "NaN",
    "oob": "out-of-bounds write: 8 elements after output 0 (shape (4, 8)) were overwritten",
    "triton_nomask": "out-of-bounds write: 32 elements after output 0",  # a 64-wide block over 32 elements, no mask
    "smem": "shared memory 262144 B > limit 232448 B (launch _k0)",
}


@pytest.mark.slow  # 5-7 s a group: every planted candidate through the worker
@pytest.mark.parametrize("group", sorted(GROUPS))
def test_planted_candidates_get_the_right_status_and_stage(tmp_path, group):
    cands = {cid: CANDIDATES[cid] for cid in GROUPS[group]}
    bundle = make_bundle(tmp_path / "b", cands)
    out = tmp_path / "rows.jsonl"
    proc = subprocess.run([PY, "-m", "axon_eg.measure", str(bundle), "--out", str(out), "--cpu"], env=ENV,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = {r["id"]: r for r in read_rows(out)}
    assert set(rows) == set(cands)
    for cid in cands:
        assert (rows[cid]["status"], rows[cid]["stage"]) == EXPECTED[cid], (cid, rows[cid]["error"])
        assert MESSAGES.get(cid, "") in (rows[cid]["error"] or ""), (cid, rows[cid]["error"])
    good = rows["good"]
    assert good["error"] is None and good["max_abs_err"] <= 1e-6 and good["median_us"] is None  # CPU: no timing
    assert good["torch_version"] and good["triton_version"] and good["timestamp"] and good["device"].startswith("cpu")
    assert (good["kind"], good["predicted_us"]) == ("candidate", 3.5)
    assert {(r["cache_key"], r["program"], r["hw"], r["target"]) for r in rows.values()} == {("k0", "add", "cpu-test", "triton")}
    if group == "gates":
        assert rows["smem"]["elapsed_s"] < 0.5  # rejected before a child started
        assert rows["triton"]["max_abs_err"] <= 1e-6  # a @triton.jit kernel, run by the interpreter on the CPU
    else:
        assert rows["good_return"]["kind"] == "baseline"
    # the rows load into the measurements table
    n = tables.import_jsonl(out, cache=tmp_path / "cache")
    df = tables.read("measurements", cache=tmp_path / "cache").collect()
    assert n == df.height == len(cands)
    counts = dict(df.group_by("status").len().iter_rows())
    assert counts == dict(Counter(EXPECTED[cid][0] for cid in cands))
    assert df.filter(pl.col("id") == "good")["kind"].to_list() == ["candidate"]


def test_precomputed_npz_reference(tmp_path):
    ref = {}
    for s in range(3):
        x, y = (t.double().numpy() for t in harness.make_inputs(SPECS, s))
        ref[f"seed{s}_out0"] = x + y
    root = make_bundle(tmp_path / "b", {"good": CANDIDATES["good"], "wrong": CANDIDATES["wrong"]},
                       reference="ref.npz")
    np.savez(root / "ref.npz", **ref)
    rows = {r["id"]: r for r in run_bundle(root, tmp_path / "o.jsonl", gpus=[])}
    assert rows["good"]["status"] == "ok" and rows["wrong"]["status"] == "wrong_result"


def test_harness_in_process_modes_and_dtypes():
    def ref(x, y):
        return x * y

    def dps(x, y, out):
        out.copy_(x * y)

    def ret(x, y):
        return x * y

    for dt in ("fp32", "bf16", "fp16"):
        specs = [{"name": "x", "shape": [16, 16], "dtype": dt}, {"name": "y", "shape": [16], "dtype": dt,
                                                                "positive": True}]
        assert harness.check_correctness(dps, specs, ref).status == "ok"
        assert harness.check_correctness(ret, specs, ref).status == "ok"
    xs = harness.make_inputs([("p", (1000,), "fp32", True), ("n", (1000,), "bf16")], seed=1)
    assert (xs[0] > 0).all() and (xs[1] != 0).all()
    a, b = harness.make_inputs(SPECS, 0), harness.make_inputs(SPECS, 1)
    assert not np.array_equal(a[0].numpy(), b[0].numpy())  # fresh inputs per trial
    res = harness.measure(dps, SPECS, ref, device="cpu")
    assert res.status == "ok" and res.trials >= 3 and res.median_us is None


def test_correctness_trials_shrink_with_the_inputs_size():
    """3 trials on ordinary inputs, 2 above 2^26 input elements, 1 above 2^28: a trial at these sizes costs
    seconds (inputs, the float64 reference, the comparison) and covers 10^8 random values."""
    lo, hi = harness.TRIAL_ELEMS
    assert harness.trials_for([("x", (lo,), "fp32")]) == harness.MIN_TRIALS == 3
    assert harness.trials_for([("x", (lo,), "fp32"), ("y", (1,), "fp32")]) == 2
    assert harness.trials_for([("x", (2, hi // 2), "bf16")]) == 2
    assert harness.trials_for([("x", (hi + 1,), "fp32")]) == 1
    calls = []

    def ref(seed):
        calls.append(seed)
        return harness.make_inputs([("x", (7,), "fp32")], seed)[0].double().numpy()

    ref._takes_seed = True
    res = harness.check_correctness(lambda x: x.clone(), [("x", (7,), "fp32")], ref, trials=5)
    assert res.status == "ok" and calls == [0, 1, 2, 3, 4]  # asked for more: more


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(1024, 8192), magnitude=st.floats(0.5, 1e5))
def test_tolerance_passes_rounding_tails_and_fails_bugs(seed, n, magnitude):
    """An output whose error is bf16-like noise (rms 0.3% of the output's, a few tail elements at 5%)
    passes; a wrong block, a NaN, or a systematic 2% bias does not, at any output magnitude."""
    gen = torch.Generator().manual_seed(seed)
    ref = torch.randn(n, generator=gen, dtype=torch.float64) * magnitude
    rms = float(ref.pow(2).mean().sqrt())
    noisy = ref + torch.randn(n, generator=gen, dtype=torch.float64) * 0.003 * rms
    noisy[:: n // 4] += 0.05 * rms  # four tail elements, as a K = 11008 bf16 accumulation shows
    assert harness.compare(noisy, ref, harness.TOLERANCES["bf16"])[0] == "ok"
    wrong = noisy.clone()
    wrong[n // 2: n // 2 + 16] = torch.randn(16, generator=gen, dtype=torch.float64) * magnitude  # another tile's values
    assert harness.compare(wrong, ref, harness.TOLERANCES["bf16"])[0] in ("over", "norm")
    nan = noisy.clone()
    nan[seed % n] = float("nan")
    assert harness.compare(nan, ref, harness.TOLERANCES["bf16"])[0] == "nonfinite"
    biased = ref * 1.02 + 0.02 * max(1.0, rms)
    assert harness.compare(biased, ref, harness.TOLERANCES["bf16"])[0] == "norm"


@settings(max_examples=50, deadline=None)
@given(base=st.floats(1.0, 1e4), noise=st.lists(st.floats(0.0, 0.5), min_size=2, max_size=3), seed=st.integers(0, 2**16))
def test_steadiest_batch_is_kept(base, noise, seed):
    """Of timing batches with different jitter, the statistics come from the one with the smallest relative
    IQR, whatever the latency's scale."""
    rng = np.random.default_rng(seed)
    batches = [list(base * (1 + abs(rng.normal(0, j, 30)))) for j in noise]
    kept = harness.steadiest(batches)
    assert all(harness._spread(kept) <= harness._spread(b) for b in batches)
    assert harness.steadiest([[base] * 30, kept]) == [base] * 30  # a perfectly steady batch wins


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_loses_and_duplicates_nothing(tmp_path):
    slow = "import time\ndef kernel(x, y, out):\n    time.sleep(0.3)\n    out.copy_(x + y)\n"
    cands = {f"c{i}": slow for i in range(5)}
    bundle = make_bundle(tmp_path / "b", cands)
    out = tmp_path / "rows.jsonl"
    proc = subprocess.Popen([PY, "-m", "axon_eg.measure", str(bundle), "--out", str(out), "--cpu"], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(read_rows(out)) < 2:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = read_rows(out)
    assert 2 <= len(before) < len(cands)
    with open(out, "a") as f:  # a torn last line, as if killed mid-write
        f.write('{"id": "c4", "status": "o')
    subprocess.run([PY, "-m", "axon_eg.measure", str(bundle), "--out", str(out), "--cpu"], env=ENV, check=True,
                   capture_output=True, timeout=120)
    after = read_rows(out)
    ids = [r["id"] for r in after]
    assert sorted(ids) == sorted(cands) and len(ids) == len(set(ids))
    assert after[: len(before)] == before  # nothing rewritten
    assert all(r["status"] == "ok" for r in after)


WRITER = """
import sys
from axon_eg.measure import tables
for i in range(15):
    tables.append("events", [{"writer": int(sys.argv[2]), "i": i, "k": k} for k in range(4)], cache=sys.argv[1])
"""


def test_concurrent_table_writers_lose_nothing(tmp_path):
    cache = tmp_path / "cache"
    procs = [subprocess.Popen([PY, "-c", WRITER, str(cache), str(w)]) for w in range(2)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    df = tables.read("events", cache=cache).collect()
    assert df.height == 2 * 15 * 4
    assert df.unique().height == df.height
    assert not list((cache / "tables" / "events").glob(".*tmp"))


def test_table_schema_validation_and_cache_dir(tmp_path, monkeypatch):
    row = dict.fromkeys(table_schemas.SCHEMA)
    row.update(id="a", status="ok")
    with pytest.raises(ValueError, match="'bogus'"):
        tables.append("measurements", [{**row, "bogus": 1}], cache=tmp_path)
    bad = dict(row)
    del bad["status"]
    with pytest.raises(ValueError, match="'status'"):
        tables.append("measurements", [bad], cache=tmp_path)
    monkeypatch.setenv("AXON_EG_CACHE", str(tmp_path / "env"))
    assert part_store.cache_dir() == tmp_path / "env" and part_store.cache_dir(tmp_path / "arg") == tmp_path / "arg"
    tables.append("measurements", [row])
    assert tables.read("measurements").collect().height == 1
    assert tables.read("measurements", cache=tmp_path / "none").collect().height == 0


def test_worker_imports_only_numpy_torch_triton():
    code = ("import axon_eg.measure.worker, axon_eg.measure.harness, axon_eg.measure.ray_runner, sys; "
            "bad = [m for m in sys.modules if m.startswith(('egglog', 'z3', 'polars', 'matplotlib', 'ray.')) or m == 'ray']; "
            "assert not bad, bad")
    subprocess.run([PY, "-c", code], check=True, timeout=60)
    src = Path(harness.__file__).parent
    for f in ("__init__.py", "harness.py", "worker.py", "__main__.py", "ray_runner.py"):
        assert not any(f"import {m}" in (src / f).read_text() for m in ("polars", "egglog", "z3")), f


def test_syntax_errors_never_start_a_child(tmp_path):
    bundle = make_bundle(tmp_path / "b", {"syntax": CANDIDATES["syntax"]})
    t = time.monotonic()
    (row,) = run_bundle(bundle, tmp_path / "o.jsonl", gpus=[])
    assert row["status"] == "syntax_error" and time.monotonic() - t < 1.0
    assert row["error"].startswith("SyntaxError")


def test_the_stop_limit_follows_the_fastest_correct_kernel_so_far():
    from axon_eg.measure.worker import STOP_FACTOR, stop_limit

    assert stop_limit([]) is None and stop_limit([{"status": "wrong_result", "median_us": 1.0}]) is None
    rows = [{"status": "ok", "median_us": 40.0}, {"status": "ok", "median_us": 25.0},
            {"status": "performance", "median_us": 900.0}, {"status": "ok", "median_us": None}]
    assert stop_limit(rows) == pytest.approx(STOP_FACTOR * 25.0) and stop_limit(rows, 3.0) == pytest.approx(75.0)


def test_a_stopped_timing_is_recorded_as_performance_with_its_probe(monkeypatch):
    stats = {"median_us": 5000.0, "iqr_us": None, "mean_us": 5000.0, "min_us": 4900.0, "runs": 3, "stopped": True}
    monkeypatch.setattr(harness, "time_candidate", lambda *a, **k: dict(stats))
    res = harness.measure(lambda x: x * 2.0, [("x", (8,), "fp32")], lambda x: x * 2.0, device="cpu", stop_above_us=250.0)
    assert res.status == "performance" and res.stage == "timing" and res.median_us == 5000.0
    assert "5000.0 us > 250.0 us" in res.error
    from axon_eg.measure.table_schemas import is_final

    assert not is_final("performance")  # measured again by a rerun, never cached as final


def test_a_reference_precomputed_from_cpu_draws_gets_the_same_inputs():
    """Inputs drawn on the device (large ones, ``device_draw``) only where the reference is computed from
    the tensors themselves: a precomputed (npz) reference was drawn by the CPU generator, and the kernel
    must see those values (on the CPU both draws are the CPU generator's)."""
    spec = [("x", (harness.DEVICE_DRAW_ELEMS + 1,), "fp32")]
    a = harness.make_inputs(spec, 3)[0]
    b = harness.make_inputs(spec, 3, device_draw=True)[0]
    assert torch.equal(a, b)  # no GPU here: the CPU generator either way


def test_programs_with_fp32_library_convolutions_are_held_to_the_tf32_tolerance():
    from axon_eg.bundle import library_tolerance
    from axon_eg.ir.builder import Builder
    from axon_eg.ir.dtypes import bf16, fp32

    for dtype, want in ((fp32, "tf32"), (bf16, None)):
        b = Builder("c")
        x, w = b.input("x", (2, 3, 9), dtype), b.input("w", (4, 3, 3), dtype)
        p = b.build([b.emit("relu", b.emit("conv1d", x, w))])
        assert library_tolerance(p) == want
    b = Builder("p")
    p = b.build([b.emit("max_pool1d", b.input("x", (2, 3, 9), fp32), kernel_size=(2,))])
    assert library_tolerance(p) is None
    # the harness holds outputs to the looser of their dtype's and the named tolerance
    ref = lambda x: x  # noqa: E731 - NumPy float64 in, out
    off = lambda x: x * (1 + 5e-4)  # noqa: E731
    spec = [("x", (64,), "fp32")]
    assert harness.check_correctness(off, spec, ref).status == "wrong_result"
    assert harness.check_correctness(off, spec, ref, tolerance="tf32").status == "ok"


def test_a_timed_batch_holds_the_gpu_until_the_host_has_enqueued_it(monkeypatch):
    """The spinning kernel goes first, then every run's flush, events and call, then one synchronize: no
    run's timed window can wait for the host (GPU-free: the CUDA calls are recorded, not made)."""
    log = []

    class Event:
        def __init__(self, enable_timing):
            self.t = None

        def record(self):
            log.append("record")

        def elapsed_time(self, other):
            return 0.02

    class Flush:
        device = "cuda"

        def zero_(self):
            log.append("flush")

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: log.append(("sleep", cycles)), raising=False)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: log.append("sync"))
    times = harness._batch(lambda *a: log.append("call"), "dps", [], [], Flush(), 3)
    assert times == [20.0] * 3
    assert log == [("sleep", harness.HOLD_CYCLES)] + ["flush", "record", "call", "record"] * 3 + ["sync"]


def test_a_closure_over_its_inputs_is_timed_without_specs():
    """``benchmarks/models.py`` times a whole model as ``lambda: model(*inputs)`` with no specs and no output
    buffers (``time_candidate(fn, [], mode="return")``): the buffers are none, not the first spec's dtype."""
    from axon_eg.measure.harness import TensorInput, output_buffers

    assert output_buffers([], [], [], "cpu") == []
    spec = TensorInput.coerce(("x", (2, 3), "fp16"))
    (buf,) = output_buffers([spec], [(4, 5)], [], "cpu")
    assert buf.shape == (4, 5) and buf.dtype == torch.float16
    with pytest.raises(ValueError, match="need their dtypes"):
        output_buffers([], [(4, 5)], [], "cpu")


def test_a_modules_weight_is_drawn_at_its_initialization_scale():
    """``input_specs`` gives a weight (a parameter, buffer or frozen input of rank >= 2) the scale 1 / sqrt(fan-in)
    and data none; ``make_inputs`` draws it so (never zeros), and the unit-scale draw is unchanged."""
    import math

    from axon_eg.backends.kernel import input_specs, weight_scale
    from axon_eg.ir.builder import Builder
    from axon_eg.measure.harness import make_inputs

    b = Builder("lin")
    x, w, g = b.input("x", (64, 300), "fp32"), b.input("w", (200, 300), "fp32"), b.input("g", (300,), "fp32")
    program = b.build(b.emit("matmul", b.emit("mul", x, g), b.emit("transpose", w, perm=(1, 0))),
                      roles={"w": "parameter", "g": "parameter"})
    specs = {s["name"]: s for s in input_specs(program)}
    assert "scale" not in specs["x"] and "scale" not in specs["g"]
    assert specs["w"]["scale"] == weight_scale("parameter", (200, 300)) == 1 / math.sqrt(300)
    assert weight_scale("input", (200, 300)) == 1.0 and weight_scale("frozen", (4, 3, 3, 3)) == 1 / math.sqrt(27)
    xs, ws, gs = make_inputs(list(specs.values()), seed=3)
    assert abs(float(xs.std()) - 1) < 0.05 and abs(float(ws.std()) * math.sqrt(300) - 1) < 0.05
    assert bool((ws != 0).all()) and bool((xs != 0).all())
    unscaled = make_inputs([{k: v for k, v in s.items() if k != "scale"} for s in specs.values()], seed=3)
    assert torch.equal(unscaled[0], xs) and torch.allclose(ws, unscaled[1] * specs["w"]["scale"])


def test_a_child_finds_dynamo_and_inductor_imported_and_inductor_on_one_thread(tmp_path):
    """The fork server imports dynamo and Inductor once (a torch.compile baseline's child does not pay for the
    import) with one compile thread and NVML's CUDA check in its environment, which its children inherit."""
    probe = ("import os, sys\n"
             "missing = [m for m in ('torch._dynamo', 'torch._inductor.compile_fx') if m not in sys.modules]\n"
             "env = {k: os.environ.get(k) for k in ('TORCHINDUCTOR_COMPILE_THREADS', 'PYTORCH_NVML_BASED_CUDA_CHECK')}\n"
             "if missing or env != {'TORCHINDUCTOR_COMPILE_THREADS': '1', 'PYTORCH_NVML_BASED_CUDA_CHECK': '1'}:\n"
             "    raise RuntimeError(f'not preloaded: {missing} {env}')\n"
             "def kernel(x, y, out):\n    out.copy_(x + y)\n")
    bundle = make_bundle(tmp_path / "b", {"probe": probe})
    env = {k: v for k, v in ENV.items() if k not in ("TORCHINDUCTOR_COMPILE_THREADS", "PYTORCH_NVML_BASED_CUDA_CHECK")}
    row = measured_on_cpu(bundle, tmp_path / "rows.jsonl", env)["probe"]
    assert row["status"] == "ok", row["error"]


INTEGRITY = {
    "clock": "import time\ntime.perf_counter = lambda: 0.0\ndef kernel(x, y, out):\n    out.copy_(x + y)\n",
    "sync": ("import torch\ndef kernel(x, y, out):\n    torch.cuda.synchronize = lambda *a, **k: None\n"
             "    out.copy_(x + y)\n"),
    "cached": ("_CACHE = {}\ndef kernel(x, y, out):\n    key = (x.data_ptr(), y.data_ptr())\n"
               "    if key not in _CACHE:\n        _CACHE[key] = x + y\n    out.copy_(_CACHE[key])\n"),
    "thread": ("import threading, time\ndef kernel(x, y, out):\n"
               "    def late():\n        time.sleep(0.5)\n        out.copy_(x + y)\n"
               "    threading.Thread(target=late).start()\n"),
    "good": CANDIDATES["good"],
}


def test_the_integrity_battery_refuses_each_cheat_at_its_stage_with_a_named_reason(tmp_path):
    """A clock or a synchronization replaced (at import or in a call), a result kept by input pointer and an
    output written by a thread that outlives the call (what a side stream does on a GPU) are refused at stage
    ``integrity``, each saying what it did; an honest candidate beside them is ok."""
    rows = measured_on_cpu(make_bundle(tmp_path / "b", INTEGRITY), tmp_path / "rows.jsonl")
    assert rows["good"]["status"] == "ok" and not rows["good"].get("constant_reference")
    reasons = {"clock": "replaced time.perf_counter", "sync": "replaced torch.cuda.synchronize",
               "cached": "output 0 is the previous call's", "thread": "a thread outlives the call"}
    for cid, reason in reasons.items():
        assert (rows[cid]["status"], rows[cid]["stage"]) == ("wrong_result", "integrity"), (cid, rows[cid])
        assert reason in rows[cid]["error"], (cid, rows[cid]["error"])


def test_a_reference_that_depends_on_no_input_is_said_on_the_row(tmp_path):
    bundle = make_bundle(tmp_path / "b", {"zero": "def kernel(x, y, out):\n    out.zero_()\n"}, reference="const.py:ref")
    (bundle / "const.py").write_text("def ref(x, y):\n    return x - x\n")
    row = measured_on_cpu(bundle, tmp_path / "rows.jsonl")["zero"]
    assert row["status"] == "ok" and row["constant_reference"] is True
