"""Batch statistics (issue 53): training-mode batch norm's per-channel mean and variance over N, H and W (a mean
without its kept axes, viewed back to ``[C, 1, 1]``, as the importer writes it), computed with the apply pass in
one group: the mean and the squared deviations by Welford's update in one pass over each channel's strided
elements, split across programs (Chan's combine) for few channels; against float64 under TRITON_INTERPRET=1 on
random shapes (batch 1, odd sizes, channels longer than a block), values with a large mean and a small spread."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from axon_eg.backends.triton.backend import TRITON  # noqa: E402
from axon_eg.backends.triton.emit import emit  # noqa: E402
from axon_eg.egraph.nugraph import Variant  # noqa: E402
from axon_eg.extract.candidates import Candidate  # noqa: E402
from axon_eg.extract.fusion import REDUCTION, plans  # noqa: E402
from axon_eg.extract.tiling import Tiling  # noqa: E402
from axon_eg.hw import load  # noqa: E402
from axon_eg.ir.builder import Builder  # noqa: E402
from axon_eg.ir.dtypes import bf16, fp32  # noqa: E402
from axon_eg.testing.kernels import run_kernel  # noqa: E402

H200 = load("h200")


def batch_norm_train(shape: tuple[int, int, int, int], dtype, offset: float, view: str):
    """``(x' - mean) * rsqrt(var + eps) * w + b`` with ``x' = x * 0.1 + offset`` and the statistics over axes 0,
    2 and 3, the mean and variance without their kept axes and ``view`` (reshape / expand_dims) back. At an
    offset of 100 the variance is 1e-6 of the mean square: ``E[x^2] - E[x]^2`` in fp32 would be off by percents."""
    n, c, h, w = shape
    b = Builder("bn_train")
    x = b.input("x", shape, dtype)
    weight, bias = b.input("weight", (c,), fp32), b.input("bias", (c,), fp32)
    xs = b.emit("add", b.emit("mul", x, b.constant(0.1, fp32)), b.constant(offset, fp32))

    def back(v):
        return (b.emit("reshape", v, shape=(c, 1, 1)) if view == "reshape" else
                b.emit("expand_dims", b.emit("expand_dims", v, axis=1), axis=2))

    mean = back(b.emit("mean", xs, axes=(0, 2, 3), keepdims=False))
    d = b.emit("sub", xs, mean)
    var = back(b.emit("mean", b.emit("square", d), axes=(0, 2, 3), keepdims=False))
    y = b.emit("mul", d, b.emit("rsqrt", b.emit("add", var, b.constant(1e-5, fp32))))
    y = b.emit("add", b.emit("mul", y, b.emit("reshape", weight, shape=(c, 1, 1))), b.emit("reshape", bias, shape=(c, 1, 1)))
    return b.build([y]).expand()


@settings(max_examples=int(os.environ.get("AXON_EG_BATCH_STATS_EXAMPLES", "6")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(shape=st.sampled_from(((2, 3, 5, 7), (1, 2, 9, 4), (3, 1, 6, 5), (4, 5, 1, 1), (2, 3, 17, 1))),
       split=st.sampled_from((1, 2, 3)), block_n=st.sampled_from((8, 16)), dtype=st.sampled_from((fp32, bf16)),
       offset=st.sampled_from((0.0, 100.0)), view=st.sampled_from(("reshape", "expand_dims")))
def test_batch_statistics_are_one_welford_pass_then_the_apply_pass(shape, split, block_n, dtype, offset, view, tmp_path):
    program = batch_norm_train(shape, dtype, offset, view)
    plan = next(p for p in plans(program) if len(p.groups) == 1 and p.groups[0].kind == REDUCTION)
    assert plan.welford_pairs(0), "the mean and the variance are a Welford pair"
    t = Tiling(0, (("BLOCK_N", block_n), ("ROWS_PER_PROGRAM", 1), ("num_warps", 1), ("SPLIT", split)))
    kernel = emit(Candidate(Variant(program, 0, 0, 0), plan, (t,), (), 0.0, TRITON.cost(plan, (t,), H200)), H200, "k")
    columns = shape[0] * shape[2] * shape[3]
    if split > 1 or columns > block_n:  # chunked: the statistics' loop, then the apply loop
        assert "w_chunk" in kernel.source or "_part[" in kernel.source, kernel.source
    out = run_kernel(kernel, program, tmp_path)
    assert out.status == "ok", f"{out.error}\n{kernel.source}"
