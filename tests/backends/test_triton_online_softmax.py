"""Softmax, log-softmax and logsumexp over rows longer than a block (issue 53): the row's max and its sum of
``exp(x - max)`` in one pass with the online rescale (rule ``exp_online_rescale``), and split across programs,
each slice's (max, sum) combined by the same rescale; against float64 under TRITON_INTERPRET=1, on random
shapes (one row, odd lengths, lengths just above a block), values far from 0 with a small spread."""

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
BLOCK = 16


def program_of(op: str, shape: tuple[int, ...], dtype, scale: float, offset: float):
    """``op(x * scale + offset)`` over the last axis: a large ``offset`` (a large mean, a small spread) or a
    large ``scale`` (``exp`` of the unshifted values overflows fp32) stress the shift."""
    b = Builder(f"online_{op}")
    x = b.input("x", shape, dtype)
    v = b.emit("add", b.emit("mul", x, b.constant(scale, fp32)), b.constant(offset, fp32))
    if op == "logsumexp":
        out = b.emit("logsumexp", v, axes=(len(shape) - 1,), keepdims=False)
    else:
        out = b.emit(op, v, axis=-1)
    return b.build([out]).expand()


def candidate(program, split: int, rows: int) -> Candidate:
    plan = next(p for p in plans(program) if len(p.groups) == 1 and p.groups[0].kind == REDUCTION)
    t = Tiling(0, (("BLOCK_N", BLOCK), ("ROWS_PER_PROGRAM", rows), ("num_warps", 1), ("SPLIT", split)))
    return Candidate(Variant(program, 0, 0, 0), plan, (t,), (), 0.0, TRITON.cost(plan, (t,), H200))


@settings(max_examples=int(os.environ.get("AXON_EG_ONLINE_EXAMPLES", "10")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(op=st.sampled_from(("softmax", "log_softmax", "logsumexp")),
       shape=st.sampled_from(((1, 17), (3, 33), (1, 101), (2, 3, 47), (5, 16), (1, 1, 65))),
       split=st.sampled_from((1, 2, 3, 5)), rows=st.sampled_from((1, 2)), dtype=st.sampled_from((fp32, bf16)),
       offset=st.sampled_from((0.0, 300.0, -5000.0)), scale=st.sampled_from((0.75, 40.0)))
def test_the_statistics_of_a_long_row_are_one_online_pass(op, shape, split, rows, dtype, offset, scale, tmp_path):
    program = program_of(op, shape, dtype, scale, offset)
    plan_kernel = emit(candidate(program, split, rows), H200, "k")
    src = plan_kernel.source
    if split == 1 and shape[-1] <= BLOCK:  # the row in one block: in registers, max then sum, no loop
        assert "exp_online_rescale" not in src and "for c0 in range(" not in src, src
    else:
        assert "exp_online_rescale" in src, src
    if split > 1:
        assert "_part[" in src and "_finish[" in src
    elif shape[-1] > BLOCK:  # the statistics' loop, then (softmax, log-softmax) the store loop: none for the sum
        loops = src.count("for c0 in range(")
        tails = src.count("the partial last chunk")
        assert loops - tails == (1 if op == "logsumexp" else 2), src
    out = run_kernel(plan_kernel, program, tmp_path)
    assert out.status == "ok", f"{out.error}\n{src}"
