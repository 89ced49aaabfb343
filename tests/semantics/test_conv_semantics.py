"""Convolutions have element semantics: the normal form of conv{1,2,3}d (stride, padding, dilation, groups,
bias) agrees with the registry's float64 reference, also where those attributes are symbolic dims (one
normal form for every value), and the prover tells identities that hold for every padding from those that
hold only without one."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from axon_eg.ir import dims as D
from axon_eg.ir.builder import Builder
from axon_eg.ir.interpret import interpret
from axon_eg.ir.program import Program
from axon_eg.semantics.numeric import PolyEvaluator
from axon_eg.semantics.op_semantics import Evaluator
from axon_eg.semantics.prover import prove_equal

SIZES = (1, 2, 3, 5)  # 1 and odd sizes


@st.composite
def concrete_convs(draw: st.DrawFn) -> Program:
    """A conv{1,2,3}d of random shape, stride, padding, dilation and groups, with or without a bias, whose
    dilated window fits its padded input."""
    n = draw(st.integers(1, 3))
    groups = draw(st.sampled_from((1, 1, 2, 3)))
    per_group_in, per_group_out = draw(st.sampled_from(SIZES[:3])), draw(st.sampled_from(SIZES[:3]))
    stride = [draw(st.integers(1, 3)) for _ in range(n)]
    dilation = [draw(st.integers(1, 2)) for _ in range(n)]
    padding = [draw(st.integers(0, 2)) for _ in range(n)]
    kernel = [draw(st.sampled_from(SIZES)) for _ in range(n)]
    spatial = [max(1, d * (k - 1) + 1 - 2 * p) + draw(st.sampled_from((0, 1, 2, 4)))
               for d, k, p in zip(dilation, kernel, padding)]
    b = Builder("conv")
    x = b.input("x", (draw(st.sampled_from((1, 2))), per_group_in * groups, *spatial), "fp32")
    w = b.input("w", (per_group_out * groups, per_group_in, *kernel), "fp32")
    bias = [b.input("bias", (per_group_out * groups,), "fp32")] if draw(st.booleans()) else []
    return b.build(b.emit(f"conv{n}d", x, w, *bias, stride=tuple(stride), padding=tuple(padding),
                          dilation=tuple(dilation), groups=groups))


def _inputs(program: Program, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for spec, node in zip(program.inputs, program.input_ids):
        shape = program.concrete_shape(node)  # never zero: a zero would hide a wrong index
        out[spec.name] = rng.uniform(0.25, 2.0, size=shape) * rng.choice((-1.0, 1.0), size=shape)
    return out


def _agree(program: Program, dims: dict[str, int], poly, idx, inputs: dict[str, np.ndarray]) -> None:
    want = interpret(program.bind(dims) if dims else program, inputs)
    numeric = PolyEvaluator(dims, inputs)
    for at in np.ndindex(want.shape):
        got = numeric.evaluate(poly, {ix.terms[0][0]: v for ix, v in zip(idx, at)})
        assert abs(got - want[at]) <= 1e-9 * (1 + abs(want[at])), f"at {at}: normal form {got}, reference {want[at]}"


@settings(max_examples=60, deadline=None)
@given(program=concrete_convs(), seed=st.integers(0, 2**31 - 1))
def test_conv_normal_form_agrees_with_the_reference(program: Program, seed: int) -> None:
    poly, idx = Evaluator(program).output(0)
    _agree(program, {}, poly, idx, _inputs(program, seed))


def _symbolic_conv(n: int, bias: bool) -> Program:
    """conv{n}d over named dims with every attribute a symbolic dim (as rule obligations have them)."""
    stride = tuple(D.sym(f"attr_stride{j}") for j in range(n))
    padding = tuple(D.add(D.sym(f"attr_padding{j}"), -1) for j in range(n))  # any padding >= 0
    dilation = tuple(D.sym(f"attr_dilation{j}") for j in range(n))
    groups = D.sym("attr_groups")
    b = Builder("conv")
    x = b.input("x", ("N", D.mul(D.sym("C"), groups), *("H", "W", "Z")[:n]), "fp32")
    w = b.input("w", ("O", "C", *("K", "L", "J")[:n]), "fp32")
    extra = [b.input("bias", ("O",), "fp32")] if bias else []
    return b.build(b.emit(f"conv{n}d", x, w, *extra, stride=stride, padding=padding, dilation=dilation, groups=groups))


@pytest.mark.parametrize("n, bias", [(1, True), (2, False), (3, False)])
def test_one_symbolic_normal_form_holds_at_every_attribute_value(n: int, bias: bool) -> None:
    program = _symbolic_conv(n, bias)
    poly, idx = Evaluator(program).output(0)  # built once, symbolic in stride, padding, dilation, groups
    rng = np.random.default_rng(n)
    checked = 0
    names = sorted(program.free_dims)
    for _ in range(300):
        dims = {k: int(rng.integers(1, 4)) for k in names}
        try:
            bound = program.bind(dims)
        except Exception:  # noqa: BLE001 - a window larger than its input, channels not in groups
            continue
        _agree(program, dims, poly, idx, _inputs(bound, int(rng.integers(0, 2**31))))
        checked += 1
        if checked == 12:
            break
    assert checked == 12
    assert {f"attr_{a}0" for a in ("stride", "padding", "dilation")} | {"attr_groups"} <= program.free_dims


def _shift_identity(padding: tuple) -> tuple[Program, Program]:
    """conv(x + t, w) against conv(x, w) + t * sum(w): true without padding only (a padded zero is not shifted)."""
    sides = []
    for rhs in (False, True):
        b = Builder("shift")
        x, w, t = b.input("x", ("N", "C", "H", "W"), "fp32"), b.input("w", ("O", "C", "K", "L"), "fp32"), \
            b.input("t", (), "fp32")
        attrs = {"stride": (D.sym("attr_stride0"), D.sym("attr_stride1")), "padding": padding,
                 "dilation": (D.sym("attr_dilation0"), D.sym("attr_dilation1"))}
        if rhs:
            total = b.emit("squeeze", b.emit("sum", w, axes=(1, 2, 3), keepdims=True), axes=(3,))
            out = b.emit("add", b.emit("conv2d", x, w, **attrs), b.emit("mul", total, t))
        else:
            out = b.emit("conv2d", b.emit("add", x, t), w, **attrs)
        sides.append(b.build(out))
    return sides[0], sides[1]


def test_padding_decides_a_shift_through_conv() -> None:
    symbolic = tuple(D.add(D.sym(f"attr_padding{j}"), -1) for j in range(2))
    result = prove_equal(*_shift_identity(symbolic))
    assert result.status == "refuted", result
    assert prove_equal(*_shift_identity(symbolic), numeric=False).status != "proven"
    assert prove_equal(*_shift_identity((0, 0))).status == "proven"  # any stride and dilation


@pytest.mark.parametrize("where, holds", [("output channels", True), ("input channels", False), ("input", False)])
def test_a_channel_scale_moves_into_the_weight_along_its_output_channels_only(where: str, holds: bool) -> None:
    """mul(conv(x, w), s viewed [O, 1, 1]) is conv(x, w * s viewed [O, 1, 1, 1]) for every stride, padding,
    dilation; the same scale on the weight's input channels, or on the input, is refuted (x and w square in
    channels so that every side type-checks)."""
    attrs = {"stride": (D.sym("attr_stride0"), D.sym("attr_stride1")),
             "padding": (D.add(D.sym("attr_padding0"), -1), D.add(D.sym("attr_padding1"), -1)),
             "dilation": (D.sym("attr_dilation0"), 1)}
    sides = []
    for rhs in (False, True):
        b = Builder("scale")
        x, w, s = b.input("x", ("N", "O", "H", "W"), "fp32"), b.input("w", ("O", "O", "K", "L"), "fp32"), \
            b.input("s", ("O",), "fp32")
        if not rhs:
            out = b.emit("mul", b.emit("conv2d", x, w, **attrs), b.emit("reshape", s, shape=("O", 1, 1)))
        elif where == "output channels":
            out = b.emit("conv2d", x, b.emit("mul", w, b.emit("reshape", s, shape=("O", 1, 1, 1))), **attrs)
        elif where == "input channels":
            out = b.emit("conv2d", x, b.emit("mul", w, b.emit("reshape", s, shape=("O", 1, 1))), **attrs)
        else:
            out = b.emit("conv2d", b.emit("mul", x, b.emit("reshape", s, shape=("O", 1, 1))), w, **attrs)
        sides.append(b.build(out))
    result = prove_equal(*sides)
    assert result.status == ("proven" if holds else "refuted"), result


def test_every_symbolic_read_is_guarded_only_where_padding_may_reach_outside() -> None:
    padded = _symbolic_conv(2, False)
    poly, _ = Evaluator(padded).output(0)
    assert "ite" in repr(poly)
    b = Builder("conv")
    x, w = b.input("x", ("N", "C", "H", "W"), "fp32"), b.input("w", ("O", "C", "K", "L"), "fp32")
    unpadded = b.build(b.emit("conv2d", x, w, stride=(D.sym("attr_stride0"), 2), dilation=(1, D.sym("attr_dilation1"))))
    poly, idx = Evaluator(unpadded).output(0)
    assert "ite" not in repr(poly)  # padding 0: every read is inside, the output size makes the last window fit
    for dims in itertools.islice(({"N": 2, "C": 2, "O": 3, "H": h, "W": 7, "K": k, "L": 2, "attr_stride0": s,
                                   "attr_dilation1": d} for h, k, s, d in itertools.product((3, 6), (1, 3), (1, 2), (1, 3))
                                  if h >= k), 6):
        _agree(unpadded, dims, poly, idx, _inputs(unpadded.bind(dims), 0))
