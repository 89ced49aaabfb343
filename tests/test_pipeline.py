"""saturate_and_extract end to end on the CPU (Triton interpreter, correctness only): suite programs,
the cache (hit, miss, toolchain change), the remote-rows flow, the CLI."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # result.best runs here, on the CPU

import numpy as np
import polars as pl
import pytest
import torch
from benchmarks import suite

import axon_eg as ax
from axon_eg import pipeline
from axon_eg.cli import main
from axon_eg.ir.interpret import interpret
from axon_eg.measure import harness
from axon_eg.measure.worker import run_bundle

os.environ["AXON_EG_FORCE_CPU"] = "1"


def inputs_for(program, seed=0):
    from axon_eg.backends.kernel import input_specs

    return harness.make_inputs(input_specs(program), seed)


@pytest.mark.parametrize("name", ["silu", "softmax", "matmul_bias_gelu"])
def test_cpu_end_to_end_on_suite_programs(name, tmp_path):
    program = suite.get(name).bound(small=True)
    result = pipeline.saturate_and_extract(program, k=2, cache_dir=tmp_path, device="cpu", saturation_s=0.5)
    table = result.table
    assert set(table["kind"]) == {"baseline", "candidate"}
    assert "torch_eager" in set(table["id"]) and table.filter(pl.col("kind") == "candidate").height >= 1
    assert table.filter(pl.col("verdict") == "selected").height == 1
    assert not result.timed and result.best.kind == "candidate"
    assert "@triton.jit" in result.best.source or "torch" in result.best.source
    xs = inputs_for(program)
    got = result.best(*xs)
    ref = interpret(program, [x.double().numpy() for x in xs])
    err = np.abs(got.double().numpy() - ref)
    assert np.all(err <= 1e-2 * (max(1.0, float(np.sqrt(np.mean(ref * ref)))) + np.abs(ref)))
    assert result.phase1_s > 0 and result.phase2_s > 0
    assert result.nugraph.enode_count() > 0


def test_cache_hit_skips_measuring_and_a_toolchain_change_misses(tmp_path, monkeypatch):
    program = suite.get("rmsnorm").bound(small=True)
    first = pipeline.saturate_and_extract(program, k=1, cache_dir=tmp_path, device="cpu", saturation_s=0.3)
    assert not first.cache_hit

    def no_measuring(*a, **k):
        raise AssertionError("a cache hit must not measure")

    monkeypatch.setattr("axon_eg.measure.worker.run_bundle", no_measuring)
    again = pipeline.saturate_and_extract(program, k=1, cache_dir=tmp_path, device="cpu", saturation_s=0.3)
    assert again.cache_hit and again.cache_key == first.cache_key and again.best.id == first.best.id
    assert again.table.height == first.table.height
    real = pipeline.toolchain
    monkeypatch.setattr(pipeline, "toolchain", lambda device: {**real(device), "triton": "0.0-other"})
    with pytest.raises(AssertionError, match="must not measure"):
        pipeline.saturate_and_extract(program, k=1, cache_dir=tmp_path, device="cpu", saturation_s=0.3)
    monkeypatch.setattr(pipeline, "toolchain", real)
    h200 = pipeline.load("h200")  # the key also covers shapes, dtypes, hardware and k
    keys = {pipeline.bundle_key(program, h200, "triton", 1), pipeline.bundle_key(program, h200, "triton", 2),
            pipeline.bundle_key(suite.get("rmsnorm").program.bind(M=6, N=7), h200, "triton", 1),
            pipeline.bundle_key(program, pipeline.load("h100"), "triton", 1),
            pipeline.bundle_key(program, h200, "triton", 1, "tf32")}  # the fp32 matmul precision policy
    assert len(keys) == 5


def test_the_precision_policy_is_checked_and_follows_torch():
    import torch

    from axon_eg import validate
    from axon_eg.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match=r"precision='fp16': the fp32 matmul precision is one of ieee, strict, tf32"):
        validate.precision("fp16")
    assert [validate.precision(p) for p in ("tf32", "ieee", "strict")] == ["tf32", "ieee", "strict"]
    flags, saved = torch.backends.cuda.matmul, torch.backends.cuda.matmul.allow_tf32
    try:
        flags.allow_tf32 = True
        assert validate.precision(None) == "tf32"
        flags.allow_tf32 = False
        assert validate.precision(None) == "ieee"
    finally:
        flags.allow_tf32 = saved


def test_remote_rows_flow(tmp_path):
    program = suite.get("gelu").bound(small=True)
    bundle = pipeline.write_bundle_only(program, k=1, cache_dir=tmp_path, device="cpu", saturation_s=0.3)
    rows = tmp_path / "rows.jsonl"
    run_bundle(bundle, rows, gpus=[])
    result = pipeline.saturate_and_extract(program, k=1, cache_dir=tmp_path, device="cpu", rows=rows)
    assert result.phase1_s == 0.0 and result.phase2_s > 0
    assert set(result.table["status"]) == {"ok"}
    assert result.best(*inputs_for(program)).shape == torch.Size(program.concrete_shape(program.outputs[0]))


def test_remote_rows_imported_again_are_not_counted_twice(tmp_path):
    """Importing the same rows file again (``force``, or after a partial import) appends no copies: a row is
    one observation, identified by its candidate and timestamp; the cache then hits without the rows."""
    program = suite.get("gelu").bound(small=True)
    bundle = pipeline.write_bundle_only(program, k=1, cache_dir=tmp_path, device="cpu", saturation_s=0.3)
    rows = tmp_path / "rows.jsonl"
    run_bundle(bundle, rows, gpus=[])
    first = pipeline.saturate_and_extract(program, k=1, cache_dir=tmp_path, device="cpu", rows=rows)
    again = pipeline.saturate_and_extract(program, k=1, cache_dir=tmp_path, device="cpu", rows=rows, force=True)
    assert not again.cache_hit and again.measured == () and again.table.height == first.table.height
    log = ax.results(tmp_path).collect()
    assert log.height == first.table.height and not log["superseded"].any() and log["final"].all()
    assert pipeline.saturate_and_extract(program, k=1, cache_dir=tmp_path, device="cpu", rows=rows).cache_hit
    cands = ax.results(tmp_path, "candidates").collect()
    assert set(cands["k"]) == {1} and cands.filter(~pl.col("superseded")).height == first.table.height


def test_unbound_program_and_unknown_target_are_clear_errors():
    with pytest.raises(pipeline.PipelineError, match=r"dims \['M', 'N'\] are not bound"):
        pipeline.saturate_and_extract(suite.get("silu").program)
    with pytest.raises(pipeline.PipelineError, match="does not fit target 'nki'"):
        pipeline.saturate_and_extract(suite.get("silu").bound(), target="nki")
    with pytest.raises(pipeline.PipelineError, match="the targets are 'triton'"):
        pipeline.saturate_and_extract(suite.get("silu").bound(), target="cuda")


@pytest.mark.slow
def test_cli_optimize_writes_kernel_report_and_table(tmp_path, capsys):
    src = tmp_path / "prog.py"
    src.write_text("import axon_eg as ax\n\n@ax.program(M=3, N=40)\n"
                   "def scaled_softmax(x: ax.Tensor['M', 'N', ax.fp32]):\n    return ax.softmax(x * 0.5, axis=-1)\n")
    out = tmp_path / "out"
    code = main(["optimize", str(src), "-k", "2", "--cpu", "--out", str(out), "--cache", str(tmp_path / "cache")])
    assert code == 0
    assert "@triton.jit" in (out / "best.py").read_text()
    report = (out / "report.md").read_text()
    assert "phase 2" in report and "torch_eager" in report and "selected" in report
    assert pl.read_parquet(out / "table.parquet").height >= 2
    code = main(["optimize", str(src), "-k", "2", "--cpu", "--out", str(out), "--cache", str(tmp_path / "cache")])
    assert code == 0 and "cache hit" in (out / "report.md").read_text().replace("cache: hit", "cache hit")


@pytest.mark.parametrize("name", ["rmsnorm", "matmul_bias_gelu"])
@pytest.mark.parametrize("target", ["trn2", "trn1"])
def test_nki_target_simulates_ranks_and_selects(name, target, tmp_path):
    """Without a Trainium every NKI candidate runs in the NumPy simulator (rows say simulated) and is
    ranked by the engine model; the chosen kernel reproduces the reference through the simulator."""
    import ml_dtypes

    from axon_eg.ir.inputs import random_inputs

    program = suite.get(name).bound(small=True)
    result = pipeline.saturate_and_extract(program, target="nki", hw=target, k=3, cache_dir=tmp_path, saturation_s=0.3)
    t = result.table
    assert set(t["device"].drop_nulls()) == {f"simulated ({target})"}
    assert t.filter(pl.col("status") == "ok").height >= 1 and "selected" in set(t["verdict"])
    assert "NKI simulator" in result.summary()
    xs = random_inputs(program, 1)
    kinds = {"bf16": ml_dtypes.bfloat16, "fp32": np.float32}
    arrays = [xs[s.name].astype(kinds[s.dtype.name]) for s in program.inputs]
    got = np.asarray(result.best(*arrays), dtype=np.float64)
    ref = interpret(program, [a.astype(np.float64) for a in arrays])
    assert np.all(np.abs(got - ref) <= 2e-2 * (max(1.0, float(np.sqrt(np.mean(ref * ref)))) + np.abs(ref)))




# ------------------------------------------------------------------------------------------------
# Issue 14: a failing lowering rejects one candidate, never the run; result.best checks its arguments
# ------------------------------------------------------------------------------------------------
def _assert_best_matches(result, program, seed=1):
    xs = inputs_for(program, seed)
    got = result.best(*xs)
    ref = interpret(program, [x.double().numpy() for x in xs])
    err = np.abs(got.double().numpy() - ref)
    tol = 4 * harness.TOLERANCES[program.nodes[program.outputs[0]].dtype.name]
    assert np.all(err <= tol * (max(1.0, float(np.sqrt(np.mean(ref * ref)))) + np.abs(ref))), err.max()


@pytest.mark.parametrize("stage", ["enumerate", "emit"])
def test_a_crashing_lowering_rejects_its_candidates_and_the_run_goes_on(stage, tmp_path, monkeypatch):
    """An exception in the element-wise lowering (while the enumerator probes it, or only when the emitter
    lowers the group): the run completes, the candidates concerned are compile errors at that stage with
    the exception's type and last line, and a candidate without an element-wise group is selected."""
    from axon_eg.backends.triton import elementwise

    real = elementwise.lower

    def crashing(plan, gi, tiling, name, *args):
        if stage == "emit" and name.startswith("_probe"):
            return real(plan, gi, tiling, name, *args)
        raise RuntimeError("injected failure\nwhile lowering: the last line")

    # the enumerator's probe runs the lowering's source-free check; the emitter runs the lowering
    monkeypatch.setattr(elementwise, "lower" if stage == "emit" else "check", crashing)
    program = suite.get("matmul_bias_gelu").bound(small=True)
    result = pipeline.saturate_and_extract(program, k=4, cache_dir=tmp_path, device="cpu", saturation_s=0.3)
    t = result.table
    failed = t.filter(pl.col("status") == "compile_error")
    assert failed.height >= 1, t
    assert set(failed["stage"]) == {stage} and set(failed["verdict"]) == {"compile"}
    assert all(e.startswith("RuntimeError: while lowering: the last line") for e in failed["error"])
    assert all("injected failure" not in e for e in failed["error"])
    selected = t.filter(pl.col("verdict") == "selected").row(0, named=True)
    assert selected["status"] == "ok" and selected["kind"] == "candidate" and "elementwise" not in selected["plan"]
    _assert_best_matches(result, program)
    again = pipeline.saturate_and_extract(program, k=4, cache_dir=tmp_path, device="cpu", saturation_s=0.3)
    assert again.cache_hit and again.best.id == result.best.id  # the failures are rows like any other


@ax.program()
def min_rows_plus(x: ax.Tensor[11, 11, 12], y: ax.Tensor[11]):
    return x.min(axis=(1, 2)) + y


@ax.program()
def concat_slice_matmul(a: ax.Tensor[8, 16], w: ax.Tensor[16, 16]):
    return ax.concat([a @ w, a], axis=0)[1:].reshape(15, 1, 16) * 2.0


@pytest.mark.parametrize("program", [min_rows_plus, concat_slice_matmul], ids=lambda p: p.name)
def test_issue_14_reproducers_run_and_every_candidate_is_correct(program, tmp_path):
    """Crashed the whole run before: the row reduction's chunk loops took a row-only load for a full-width
    value (``mask=`` read as the mask), the matmul epilogue ran next() dry on a view after a slice."""
    result = pipeline.saturate_and_extract(program, k=4, cache_dir=tmp_path, device="cpu", saturation_s=0.5)
    assert set(result.table["status"]) == {"ok"}, result.summary()
    _assert_best_matches(result, program)


def test_result_best_refuses_arguments_the_kernel_was_not_built_for(tmp_path):
    from axon_eg.errors import KernelCallError

    @ax.program()
    def scaled(x: ax.Tensor[8, 16, ax.bf16], w: ax.Tensor[8, 16, ax.bf16]):
        return x * w + 1.0

    result = pipeline.saturate_and_extract(scaled, k=1, cache_dir=tmp_path, device="cpu", saturation_s=0.3)
    x, w = inputs_for(scaled)
    with pytest.raises(KernelCallError, match=r"argument x has shape \(4, 16\), this kernel was built for \(8, 16\)"):
        result.best(x[:4], w)
    with pytest.raises(KernelCallError, match=r"missing argument w \(expected bf16\[8, 16\]\)"):
        result.best(x)
    got = result.best(x, w)
    ref = x.double() * w.double() + 1.0
    assert got.shape == (8, 16) and float((got.double() - ref).abs().max()) <= 1e-2 * (1 + float(ref.abs().max()))


@pytest.mark.parametrize("rows, cols", [(3, 5), (2048, 2049)])
def test_phase1_computes_no_reference_of_large_inputs_even_for_one_scalar_out(rows, cols, tmp_path, monkeypatch):
    """A loss over big inputs has one scalar output: its float64 reference runs on the measuring device
    (``reference.py``), phase 1 makes no full-size input and interprets nothing; small programs keep ``ref.npz``."""
    from axon_eg import bundle
    from axon_eg.hw import load
    from axon_eg.ir.builder import Builder
    from axon_eg.ir.dtypes import fp32

    b = Builder("mse")
    x, y = b.input("x", (rows, cols), fp32), b.input("y", (rows, cols), fp32)
    d = b.emit("sub", x, y)
    program = b.build([b.emit("mean", b.emit("mul", d, d), axes=(0, 1))]).expand()
    big = 2 * rows * cols > bundle.NPZ_MAX_INPUT_ELEMS
    if big:
        monkeypatch.setattr(bundle, "reference_arrays", lambda *a: pytest.fail("phase 1 computed a reference"))
    root = bundle.write_bundle(tmp_path / "b", program, [], load("h200"))
    assert (root / "reference.py").exists() is big and (root / "ref.npz").exists() is not big
    assert bundle.reference_fits_npz(program) is not big
