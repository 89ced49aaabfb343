"""The cost model charges a convolution its multiply-adds at the library's measured rate."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from axon_eg.backends.triton.cost import gpu_group_cost, library_op_peak
from axon_eg.extract.cost import group_traffic
from axon_eg.extract.fusion import LIBRARY, plans
from axon_eg.hw import load
from axon_eg.ir.dtypes import bf16, fp32
from axon_eg.ir.program import Builder

H200 = load("h200")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.sampled_from((1, 2, 3)), transposed=st.booleans(), batch=st.integers(1, 3), groups=st.sampled_from((1, 2)),
       cin=st.integers(1, 5), cout=st.integers(1, 5), size=st.integers(3, 9), k=st.integers(1, 3),
       stride=st.integers(1, 2), dtype=st.sampled_from((fp32, bf16)))
def test_a_convolution_costs_its_multiply_adds_as_torch_counts_them(n, transposed, batch, groups, cin, cout, size, k,
                                                                     stride, dtype):
    """Random 1-3 d convolutions and transposed ones, grouped or not, odd sizes: the matmul flops the model
    charges are torch's own count (``FlopCounterMode``), and the group takes at least those flops at the
    library's rate (fp32: the measured TF32 conv rate, grouped or not, far below the 16-bit GEMM rate)."""
    cin, cout = cin * groups, cout * groups
    x_shape = (batch, cin, *([size] * n))
    w_shape = (cin, cout // groups, *([k] * n)) if transposed else (cout, cin // groups, *([k] * n))
    op = f"conv_transpose{n}d" if transposed else f"conv{n}d"
    b = Builder("conv")
    x, w = b.input("x", x_shape, dtype), b.input("w", w_shape, dtype)
    y = b.emit(op, x, w, stride=(stride,), groups=groups)
    program = b.build([b.emit("relu", y)]).expand()
    plan = next(p for p in plans(program) if any(g.kind == LIBRARY for g in p.groups))
    gi = next(i for i, g in enumerate(plan.groups) if g.kind == LIBRARY)
    _, mm, _ = group_traffic(plan, gi, None, math.inf)
    fn = getattr(F, op)
    with FlopCounterMode(display=False) as counter:
        fn(torch.empty(x_shape, device="meta"), torch.empty(w_shape, device="meta"), stride=stride, groups=groups)
    assert mm == counter.get_total_flops()
    which = ("library_conv_grouped_fp32" if groups > 1 else "library_conv_fp32") if dtype is fp32 else "bf16"
    rate = H200.value(f"compute.measured_peak.{which}")
    lib = next(i for i in plan.groups[gi].nodes if plan.program.nodes[i].op == op)
    assert library_op_peak(plan, gi, lib, H200) == rate
    assert gpu_group_cost(plan, gi, None, H200).seconds >= mm / rate
