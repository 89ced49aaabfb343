"""A convolution's bias becomes an add after it when a program is expanded (the epilogue adds it)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from axon_eg.ir.builder import Builder
from axon_eg.ir.dtypes import fp32
from axon_eg.ir.interpret import interpret
from axon_eg.ir.library_ops import BIAS_AFTER


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.sampled_from((1, 2, 3)), transposed=st.booleans(), batch=st.integers(1, 2), groups=st.sampled_from((1, 3)),
       cin=st.integers(1, 3), cout=st.integers(1, 3), size=st.integers(2, 7), k=st.integers(1, 3),
       stride=st.integers(1, 2), seed=st.integers(0, 2**16))
def test_an_expanded_convolution_adds_its_bias_after_it_and_computes_the_same(n, transposed, batch, groups, cin, cout,
                                                                              size, k, stride, seed):
    """Random 1-3 d convolutions and transposed ones, grouped or not, odd sizes and 1s: after ``expand`` the conv
    has no bias input and an add of the bias viewed along the channel axis follows it; the expanded program, the
    unexpanded one and torch (float64) agree."""
    cin, cout = cin * groups, cout * groups
    x_shape = (batch, cin, *([size + k] * n))
    w_shape = (cin, cout // groups, *([k] * n)) if transposed else (cout, cin // groups, *([k] * n))
    op = f"conv_transpose{n}d" if transposed else f"conv{n}d"
    assert op in BIAS_AFTER
    b = Builder("conv_bias")
    x, w, bias = b.input("x", x_shape, fp32), b.input("w", w_shape, fp32), b.input("bias", (cout,), fp32)
    program = b.build([b.emit("tanh", b.emit(op, x, w, bias, stride=(stride,), groups=groups))])
    expanded = program.expand()
    conv = next(node for node in expanded.nodes if node.op == op)
    assert len(conv.inputs) == 2
    assert [node.op for node in expanded.nodes if node.op not in ("input", op)] == ["reshape", "add", "tanh"]
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal(s) + 0.5 for s in (x_shape, w_shape, (cout,))]  # random, never all zeros
    want = torch.tanh(getattr(F, op)(*(torch.from_numpy(v) for v in values), stride=stride, groups=groups)).numpy()
    for p in (program, expanded):
        got = interpret(p, values)
        got = got[0] if isinstance(got, (list, tuple)) else got
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)
