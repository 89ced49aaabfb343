"""The NKI emitter's instruction-fusion pass (``axon_eg.backends.nki.emit_fusion``): each admitted fusion rule
fires on a kernel body where its pair occurs, the fused kernel (both dialects) runs in the simulator and
equals the unfused one and NumPy; a rule the chip cannot run (``dma_transpose`` on trn1) never fires; a pair
whose intermediate is read later keeps it; and on suite programs the rules fire where they fit."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest
from benchmarks import suite

from axon_eg.backends.nki import isa
from axon_eg.backends.nki.emit import _HEADERS, emit
from axon_eg.backends.nki.emit_fusion import fuse
from axon_eg.backends.nki.emit_writer import Writer, render
from axon_eg.backends.nki.simulator import simulate
from axon_eg.hw import load
from axon_eg.testing.kernels import candidate_for

DIALECT = {"trn2": "current", "trn1": "legacy"}
R, C = 4, 6
RNG = np.random.default_rng(7)
X = RNG.uniform(-1, 1, (R, C)).astype(np.float32)
U = RNG.uniform(0.5, 1.5, (R, 1)).astype(np.float32)
F32, BF16 = "nl.float32", "nl.bfloat16"


def kernel(target: str, body: Callable[[Writer], str], out_shape: tuple[int, ...], fused: bool,
           dtype: str = F32) -> tuple[str, list[str]]:
    """A kernel ``k(x, u)`` whose body ``body`` writes (returning the tile to store), fused or not."""
    w = Writer(DIALECT[target], target)
    w.line(f"out0 = nl.ndarray({out_shape}, dtype=nl.float32, buffer=nl.shared_hbm)")
    w.line(f"rows, cols = {R}, {C}")
    w.load("x", "x_hbm[0:rows, 0:cols]", "(rows, cols)", dtype)
    w.load("u", "u_hbm[0:rows, 0:1]", "(rows, 1)", F32)
    result = body(w)
    w.store(f"out0[0:{out_shape[0]}, 0:{out_shape[1]}]", result)
    fired = fuse(w.lines, target) if fused else []
    source = "\n".join([_HEADERS[DIALECT[target]], "@nki.jit", "def k(x_hbm, u_hbm):", *render(w.lines, DIALECT[target]),
                        "    return out0", ""])
    return source, fired


def ts_chain(w: Writer) -> str:
    w.emit("tensor_scalar", "t", {"data": "x", "op0": "multiply", "operand0": "u", "reverse0": False}, "(rows, cols)")
    w.emit("tensor_scalar", "y", {"data": "t", "op0": "add", "operand0": ("imm", 0.5), "reverse0": False}, "(rows, cols)")
    return "y"


def ts_into_scale(w: Writer) -> str:
    w.emit("tensor_scalar", "t", {"data": "x", "op0": "multiply", "operand0": "u", "reverse0": False}, "(rows, cols)")
    w.emit("activation", "y", {"data": "t", "op": "exp"}, "(rows, cols)")
    return "y"


def ts_into_bias(w: Writer) -> str:
    w.emit("tensor_scalar", "t", {"data": "x", "op0": "add", "operand0": "u", "reverse0": False}, "(rows, cols)")
    w.emit("activation", "y", {"data": "t", "op": "tanh"}, "(rows, cols)")
    return "y"


def act_reduce(w: Writer) -> str:
    w.emit("activation", "t", {"data": "x", "op": "exp"}, "(rows, cols)")
    w.emit("tensor_reduce", "y", {"axis": 1, "data": "t", "keepdims": True, "op": "add"}, "(rows, 1)")
    return "y"


def copy_then_act(w: Writer) -> str:
    w.emit("tensor_copy", "t", {"src": "x"}, "(rows, cols)")
    w.emit("activation", "y", {"data": "t", "op": "sigmoid"}, "(rows, cols)")
    w.emit("tensor_tensor", "z", {"data1": "y", "data2": "x", "op": "add"}, "(rows, cols)")  # x stays loaded
    return "z"


def act_then_copy(w: Writer) -> str:
    w.emit("activation", "t", {"data": "x", "op": "silu"}, "(rows, cols)")
    w.emit("tensor_copy", "y", {"src": "t"}, "(rows, cols)")
    return "y"


def transpose(w: Writer) -> str:
    w.shape["x"] = "(cols, rows)"
    w.emit("nc_transpose", "t", {"data": "x", "engine": "tensor"}, "(cols, rows)", BF16, "psum")
    w.emit("tensor_copy", "y", {"src": "t"}, "(cols, rows)", BF16)
    return "y"


def sigmoid(v: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-v))


CASES = {  # name: (body, expected, output shape, rules that must fire (prefixes), instruction that must vanish)
    "tensor_scalar chain": (ts_chain, lambda x, u: x * u + 0.5, (R, C), ["tensor_scalar+tensor_scalar"]),
    "multiply into activation scale": (ts_into_scale, lambda x, u: np.exp(x * u), (R, C), ["tensor_scalar+activation"]),
    "add into activation bias": (ts_into_bias, lambda x, u: np.tanh(x + u), (R, C), ["tensor_scalar+activation"]),
    "activation reduce register": (act_reduce, lambda x, u: np.exp(x).sum(1, keepdims=True), (R, 1),
                                   ["activation+tensor_reduce"]),
    "copy elimination (copy first)": (copy_then_act, lambda x, u: sigmoid(x) + x, (R, C), ["tensor_copy+activation"]),
    "copy elimination (copy last)": (act_then_copy, lambda x, u: x * sigmoid(x), (R, C), ["activation+tensor_copy"]),
}


@pytest.mark.parametrize("target", ["trn2", "trn1"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_rule_fires_and_the_fused_kernel_matches(case, target):
    body, expected, shape, rules = CASES[case]
    plain, none = kernel(target, body, shape, fused=False)
    fused, fired = kernel(target, body, shape, fused=True)
    assert none == [] and [r.split(" ->")[0] for r in fired] == rules
    calls = re.compile(r"nisa\.\w+\(")
    assert "# fused (" in fused and len(calls.findall(fused)) == len(calls.findall(plain)) - 1
    want = expected(X.astype(np.float64), U.astype(np.float64))
    got_plain, trace_plain = simulate(plain, X, U, target=target, trace=True)
    got, trace = simulate(fused, X, U, target=target, trace=True)
    assert len(trace) == len(trace_plain) - 1  # one instruction fewer
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, got_plain, rtol=1e-5, atol=1e-5)


def test_dma_copy_then_tensor_engine_transpose_becomes_a_dma_transpose_on_trn2_only():
    x = X.astype(isa.BFLOAT16)
    fused, fired = kernel("trn2", transpose, (C, R), fused=True, dtype=BF16)
    assert [r.split(" ->")[0] for r in fired] == ["dma_copy+nc_transpose", "dma_transpose+tensor_copy"]
    got, trace = simulate(fused, x, U, target="trn2", trace=True)
    assert trace.counts().get("dma_transpose") == 1 and "nc_transpose" not in trace.counts()
    np.testing.assert_array_equal(np.asarray(got), x.astype(np.float32).T)
    legacy, none = kernel("trn1", transpose, (C, R), fused=True, dtype=BF16)  # trn1 has no DMA transpose
    assert none == [] and "dma_transpose" not in legacy
    got, trace = simulate(legacy, x, U, target="trn1", trace=True)
    assert trace.counts()["nc_transpose"] == 1 and "dma_transpose" not in trace.counts()
    np.testing.assert_array_equal(np.asarray(got), x.astype(np.float32).T)


def test_a_pair_whose_intermediate_is_read_later_keeps_it():
    def body(w: Writer) -> str:
        ts_chain(w)
        w.emit("tensor_tensor", "z", {"data1": "y", "data2": "t", "op": "add"}, "(rows, cols)")  # t read again
        return "z"

    source, fired = kernel("trn2", body, (R, C), fused=True)
    assert fired == [] and source.count("nisa.tensor_scalar(") == 2


@pytest.mark.parametrize("target", ["trn2", "trn1"])
def test_fusions_fire_on_suite_programs(target):
    gqa = emit(candidate_for(suite.get("gqa").bound(small=True), target), load(target), "gqa")
    fired = {r.split(" ->")[0] for r in gqa.meta["fusions"]}
    assert {"activation+tensor_reduce", "tensor_scalar+tensor_scalar"} <= fired
    assert ("dma_copy+nc_transpose" in fired) == (target == "trn2")
    rope = emit(candidate_for(suite.get("rope").bound(small=True), target), load(target), "rope")
    assert "tensor_scalar+tensor_copy" in {r.split(" ->")[0] for r in rope.meta["fusions"]}
    # an explicit nc_transpose choice of the candidate is kept, never turned into a DMA transpose
    entry = suite.get("transpose")
    kept = emit(candidate_for(entry.bound(small=True), target, isa=((0, "nc_transpose"),)), load(target), "t")
    assert "dma_transpose" not in kept.source and kept.meta["fused_instructions"] == 0
