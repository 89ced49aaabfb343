"""One input generator (``axon_eg.ir.inputs.random_inputs``) and one set of ranges: the hypothesis
properties' inputs are its ``tame`` draws, and the device harness (which imports no axon_eg module and
draws with torch's generator) uses the same positive range."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import axon_eg as ax
from axon_eg.ir import inputs as I
from axon_eg.measure import harness
from axon_eg.testing import strategies as S


def _program(m: int, n: int):
    @ax.program(M=m, N=n)
    def p(x: ax.Tensor["M", "N", ax.fp32], v: ax.Tensor["M", "N", ax.fp32]):
        return (ax.log(v) + x) * 2.0

    return p


def test_the_harness_draws_positive_inputs_from_the_same_range() -> None:
    assert harness.POSITIVE == I.POSITIVE
    (t,) = harness.make_inputs([harness.TensorInput("v", (257, 3), "fp32", positive=True)], seed=1)
    lo, hi = I.POSITIVE
    assert lo <= float(t.min()) and float(t.max()) < hi
    assert float(t.max()) > (lo + hi) / 2 + 0.4  # the whole range is used, not only its lower half


@settings(max_examples=25, deadline=None)
@given(m=st.sampled_from([1, 2, 3, 7, 16, 17]), n=st.sampled_from([1, 3, 5, 64]), seed=st.integers(0, 2**32 - 1))
def test_tame_inputs_are_the_property_inputs_and_never_zero(m: int, n: int, seed: int) -> None:
    program = _program(m, n)
    tame = I.random_inputs(program, seed, tame=True)
    assert {k: v.tolist() for k, v in S.make_inputs(program, seed).items()} == {k: v.tolist() for k, v in tame.items()}
    lo, hi = I.POSITIVE
    assert ((tame["v"] >= lo) & (tame["v"] < hi)).all()
    magnitude = np.abs(tame["x"])
    assert ((magnitude >= I.TAME[0]) & (magnitude < I.TAME[1])).all()
    plain = I.random_inputs(program, seed)
    assert (plain["x"] != 0).all() and ((plain["v"] >= lo) & (plain["v"] < hi)).all()
