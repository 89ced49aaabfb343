"""The low-precision interpreter (axon_eg.ir.lowp) and the float-safety differential test of rules
(axon_eg.rules_discovered.float_safety)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from axon_eg.errors import ProgramError
from axon_eg.ir.builder import Builder, Value
from axon_eg.ir.interpret import interpret
from axon_eg.ir.lowp import Plan, interpret_lowp, round_to
from axon_eg.ir.program import Program
from axon_eg.rules_discovered import float_safety as F
from axon_eg.rules_discovered.float_safety import FloatSafety, check_float_safety, probe_scales, recheck
from axon_eg.testing import programs, programs_with_inputs

Side = Callable[..., Value]


def side(name: str, inputs: list[tuple[str, tuple]], body: Side) -> Program:
    b = Builder(name)
    return b.build(body(b, *[b.input(n, shape, "fp32") for n, shape in inputs]))


def rule(inputs: list[tuple[str, tuple]], lhs: Side, rhs: Side) -> tuple[Program, Program]:
    return side("lhs", inputs, lhs), side("rhs", inputs, rhs)


# -- interpret_lowp ------------------------------------------------------------------------------
def one(op: str, *shapes: tuple) -> Callable[[], Program]:
    return lambda: side(op, [(f"x{i}", s) for i, s in enumerate(shapes)], lambda b, *xs: b.emit(op, *xs))


def test_fp32_matches_float32_numpy_on_simple_chains() -> None:
    rng = np.random.default_rng(0)
    x, y, z = (rng.standard_normal((5, 7)) * 3 for _ in range(3))

    def chain(b: Builder, x: Value, y: Value, z: Value) -> Value:
        t = b.emit("div", b.emit("add", b.emit("mul", x, y), z), b.emit("add", y, b.constant(10.0, "fp32")))
        return b.emit("sum", b.emit("sub", t, x), axes=(1,))

    p = side("chain", [("x", ("M", "N")), ("y", ("M", "N")), ("z", ("M", "N"))], chain).bind(M=5, N=7)
    x32, y32, z32 = (a.astype(np.float32) for a in (x, y, z))
    want = np.sum((x32 * y32 + z32) / (y32 + np.float32(10.0)) - x32, axis=1)
    got = interpret_lowp(p, {"x": x, "y": y, "z": z}, "fp32")
    assert want.dtype == np.float32 and got.dtype == np.float64
    np.testing.assert_array_equal(got, want.astype(np.float64))  # correctly rounded ops: bit for bit

    p = side("mm", [("x", ("M", "N")), ("y", ("N", "M"))], lambda b, x, y: b.emit("exp", b.emit(
        "tanh", b.emit("matmul", x, y)))).bind(M=5, N=7)
    want = np.exp(np.tanh(x32 @ y32.T))
    got = interpret_lowp(p, {"x": x, "y": y.T}, "fp32")
    np.testing.assert_allclose(got, want, rtol=4 * 2.0**-24)  # exp/tanh: within an ulp or two


def test_overflow_is_inf() -> None:
    p = one("exp", ("N",))().bind(N=3)
    x = np.array([100.0, 1.0, -200.0])
    for precision in ("fp32", "bf16", "fp16"):
        got = interpret_lowp(p, {"x0": x}, precision)
        assert got[0] == np.inf and 2.7 < got[1] < 2.72 and got[2] == 0.0, precision
    assert interpret(p, {"x0": x})[0] == pytest.approx(np.exp(100.0))  # the float64 reference is finite
    # fp16 overflows far earlier: 300 * 300 = 90000 > 65504
    sq = side("sq", [("x", ("N",))], lambda b, x: b.emit("mul", x, x)).bind(N=2)
    assert list(interpret_lowp(sq, {"x": [300.0, -2.0]}, "fp16")) == [np.inf, 4.0]
    assert list(interpret_lowp(sq, {"x": [300.0, -2.0]}, "bf16")) == [90112.0, 4.0]  # bf16: 8 bits, fp32 range
    # and inf - inf is nan, as on the device
    d = side("d", [("x", ("N",))], lambda b, x: b.emit("sub", b.emit("exp", x), b.emit("exp", x))).bind(N=1)
    assert np.isnan(interpret_lowp(d, {"x": [100.0]}, "fp32")[0])


def test_bf16_sum_rounding_is_about_2_to_the_minus_8() -> None:
    rng = np.random.default_rng(1)
    x = rng.uniform(0.5, 2.0, size=(64, 100))
    p = side("s", [("x", ("M", "N"))], lambda b, x: b.emit("sum", x, axes=(1,))).bind(M=64, N=100)
    xb = round_to(x, "bf16")
    assert np.all(xb == x.astype(ml_dtypes.bfloat16).astype(np.float64))
    truth = xb.sum(axis=1)
    rel = np.abs(interpret_lowp(p, {"x": x}, "bf16") - truth) / truth
    assert rel.max() <= 2.0**-8 * 1.01  # one rounding of an fp32-accumulated sum: at most half an ulp
    assert rel.max() > 2.0**-11  # ... and it does round
    truth32 = x.astype(np.float32).astype(np.float64).sum(axis=1)
    assert np.abs(interpret_lowp(p, {"x": x}, "fp32") - truth32).max() / truth32.min() < 1e-6


def test_intermediates_are_rounded() -> None:
    def shift(b: Builder, x: Value) -> Value:
        big = b.constant(1e8, "fp32")
        return b.emit("sub", b.emit("add", x, big), big)

    p = side("shift", [("x", ("N",))], shift).bind(N=4)
    x = np.array([0.5, 1.25, 3.0, 5.0])
    np.testing.assert_array_equal(interpret(p, {"x": x}), x)  # float64 keeps x
    got = interpret_lowp(p, {"x": x}, "fp32")  # fp32: 1e8 + x rounds to a multiple of 8
    assert np.all(got % 8 == 0) and not np.array_equal(got, x)
    assert list(got) == [0.0, 0.0, 0.0, 8.0]


def test_inputs_and_constants_are_rounded() -> None:
    p = side("c", [("x", ("N",))], lambda b, x: b.emit("add", x, b.constant(1e-3, "fp32"))).bind(N=1)
    got = interpret_lowp(p, {"x": [1.0 / 3.0]}, "bf16")[0]
    assert got == float(ml_dtypes.bfloat16(float(ml_dtypes.bfloat16(1 / 3)) + float(ml_dtypes.bfloat16(1e-3))))


@settings(max_examples=min(settings.default.max_examples, 40), deadline=None)
@given(programs_with_inputs(max_nodes=6), st.sampled_from(["fp32", "bf16", "fp16"]))
def test_a_plan_runs_like_the_interpreters(case: tuple[Program, dict], precision: str) -> None:
    program, inputs = case
    plan = Plan(program, expand=False)
    for got, want in zip(plan.run(inputs), _tuple(interpret(program, inputs))):  # float64: the reference itself
        np.testing.assert_array_equal(got, want)
    low = Plan(program)
    for got, want in zip(low.run(inputs, precision), _tuple(interpret_lowp(program, inputs, precision))):
        np.testing.assert_array_equal(got, want)
    rounded = {k: round_to(v, precision) for k, v in inputs.items()}  # inputs already in the format: same result
    for got, want in zip(low.run(rounded, precision, rounded=True), low.run(inputs, precision)):
        np.testing.assert_array_equal(got, want)


def _tuple(x: np.ndarray | tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    return x if isinstance(x, tuple) else (x,)


# -- check_float_safety --------------------------------------------------------------------------
MN = [("x", ("M", "N"))]


def softmax_shifted(b: Builder, x: Value) -> Value:
    e = b.emit("exp", b.emit("sub", x, b.emit("max", x, axes=(1,), keepdims=True)))
    return b.emit("div", e, b.emit("sum", e, axes=(1,), keepdims=True))


def softmax_unshifted(b: Builder, x: Value) -> Value:
    e = b.emit("exp", x)
    return b.emit("div", e, b.emit("sum", e, axes=(1,), keepdims=True))


def test_dropping_the_softmax_max_shift_is_unsafe() -> None:
    result = check_float_safety(*rule(MN, softmax_shifted, softmax_unshifted))
    assert isinstance(result, FloatSafety)
    assert not result.forward, result.detail  # exp(x) overflows for x around 100
    assert result.backward, result.detail  # adding the shift is always fine
    assert "non-finite" in result.detail
    # the composite (whose expansion is the shifted form) against the unshifted formula: the same verdict
    composite = check_float_safety(*rule(MN, lambda b, x: b.emit("softmax", x, axis=1), softmax_unshifted))
    assert (composite.forward, composite.backward) == (False, True), composite.detail


def test_splitting_exp_of_a_sum_is_unsafe() -> None:
    ab = [("a", ("M", "N")), ("b", ("M", "N"))]
    result = check_float_safety(*rule(ab, lambda b, x, y: b.emit("exp", b.emit("add", x, y)),
                                      lambda b, x, y: b.emit("mul", b.emit("exp", x), b.emit("exp", y))))
    assert not result.forward, result.detail  # exp(a) overflows (or exp(b) underflows) though exp(a+b) is fine
    assert "forward:" in result.detail


def test_cancellation_is_unsafe() -> None:
    # var = mean((x - mean)^2) against mean(x^2) - mean^2: the latter cancels for inputs with an offset
    def centered(b: Builder, x: Value) -> Value:
        d = b.emit("sub", x, b.emit("mean", x, axes=(1,), keepdims=True))
        return b.emit("mean", b.emit("square", d), axes=(1,))

    def textbook(b: Builder, x: Value) -> Value:
        return b.emit("sub", b.emit("mean", b.emit("square", x), axes=(1,)),
                      b.emit("square", b.emit("mean", x, axes=(1,))))

    result = check_float_safety(*rule(MN, centered, textbook))
    assert (result.forward, result.backward) == (False, True), result.detail


def test_harmless_rules_are_safe_both_ways() -> None:
    xy = [("x", ("M", "N")), ("y", ("M", "N"))]
    two = rule(xy, lambda b, x, y: b.emit("add", b.emit("mul", x, b.constant(2.0, "fp32")),
                                          b.emit("mul", y, b.constant(2.0, "fp32"))),
               lambda b, x, y: b.emit("mul", b.emit("add", x, y), b.constant(2.0, "fp32")))
    mm = [("x", ("M", "K")), ("y", ("K", "N"))]
    transposed = rule(mm, lambda b, x, y: b.emit("transpose", b.emit("matmul", x, y), perm=(1, 0)),
                      lambda b, x, y: b.emit("matmul", b.emit("transpose", y, perm=(1, 0)),
                                             b.emit("transpose", x, perm=(1, 0))))
    ab = [("a", ("N",)), ("b_", ("N",))]
    add_swap = rule(ab, lambda b, x, y: b.emit("add", x, y), lambda b, x, y: b.emit("add", y, x))
    mul_swap = rule(ab, lambda b, x, y: b.emit("mul", x, y), lambda b, x, y: b.emit("mul", y, x))
    transpose3 = rule([("x", ("B", "M", "N"))], lambda b, x: b.emit("exp", b.emit("transpose", x, perm=(0, 2, 1))),
                      lambda b, x: b.emit("transpose", b.emit("exp", x), perm=(0, 2, 1)))
    for lhs, rhs in (two, transposed, add_swap, mul_swap, transpose3):
        result = check_float_safety(lhs, rhs)
        assert result.forward and result.backward, result.detail
        assert result.detail == "safe both ways: 22 trials in fp32, bf16, fp16"


# -- signs and cancellation (issue 14) -----------------------------------------------------------
ABC = [("a", ("N",)), ("b_", ("N",)), ("c", ("N",))]
AC = [("a", ("M", "N")), ("c", ("M", "N"))]


def distributes(outer: str) -> tuple[Program, Program]:
    """``o(a + b, c) -> o(a, c) + o(b, c)``, as ``enumerate.binary_binary`` builds it."""
    return rule(ABC, lambda b, a, b_, c: b.emit(outer, b.emit("add", a, b_), c),
                lambda b, a, b_, c: b.emit("add", b.emit(outer, a, c), b.emit(outer, b_, c)))


def through_add(red: str) -> tuple[Program, Program]:
    """``r(a + c) -> r(a) + r(c)`` over axis 1, as ``enumerate.reduce_binary`` builds it."""
    r = lambda b, x: b.emit(red, x, axes=(1,), keepdims=True)  # noqa: E731
    return rule(AC, lambda b, a, c: r(b, b.emit("add", a, c)), lambda b, a, c: b.emit("add", r(b, a), r(b, c)))


@pytest.mark.parametrize("name, pair", [
    ("mul_distributes_over_add", distributes("mul")), ("div_distributes_over_add", distributes("div")),
    ("sum_through_add_same", through_add("sum")), ("mean_through_add_same", through_add("mean"))])
def test_rewrites_that_cancel_at_opposite_signs_are_unsafe(name: str, pair: tuple[Program, Program]) -> None:
    result = check_float_safety(*pair)
    assert not result.forward, f"{name}: {result.detail}"
    assert result.backward, f"{name}: {result.detail}"  # the original side adds before it rounds: fine
    forward = result.detail.split("; backward:")[0]
    assert forward.startswith("forward: bf16 trial") and "±100 split" in forward, forward  # names the dtype and scale
    assert "relative error" in forward
    # +100 for all inputs (the old test) does not see it: the split trials do
    assert check_float_safety(*pair, trials=1).forward


def test_the_split_patterns_give_every_pair_of_inputs_opposite_signs() -> None:
    for n in range(1, 12):
        lhs, _ = rule([(f"x{i:02d}", ("N",)) for i in range(n)],
                      lambda b, *xs: xs[0] if len(xs) == 1 else b.emit("add", xs[0], xs[1]), lambda b, *xs: xs[0])
        draw = F._Inputs(lhs, lhs, ())
        splits = sum(1 for t in range(22) if F.SCHEDULE[t % len(F.SCHEDULE)].signs == "split")
        patterns = [draw.pattern(k) for k in range(splits)]
        names = sorted(s.name for s in lhs.inputs)
        for i, x in enumerate(names):
            for y in names[i + 1:]:
                assert any(p[x] != p[y] for p in patterns), (n, x, y, patterns)
        assert all(set(p.values()) <= {1.0, -1.0} for p in patterns)


def test_planted_cancellation_is_unsafe() -> None:
    big = 1e4  # (a + K) - (b + K): in bf16 the ulp of 1e4 is 64, so a - b of order 1 is lost

    def shifted(b: Builder, x: Value, y: Value) -> Value:
        k = b.constant(big, "fp32")
        return b.emit("sub", b.emit("add", x, k), b.emit("add", y, k))

    result = check_float_safety(*rule([("a", ("N",)), ("b_", ("N",))], lambda b, x, y: b.emit("sub", x, y), shifted))
    assert (result.forward, result.backward) == (False, True), result.detail
    assert "bf16" in result.detail.split("; backward:")[0]
    only_bf16 = check_float_safety(*rule([("a", ("N",)), ("b_", ("N",))], lambda b, x, y: b.emit("sub", x, y), shifted),
                                   precisions=("bf16",))
    assert not only_bf16.forward and only_bf16.detail.startswith("forward: bf16 trial 0 (N(0,1)"), only_bf16.detail


def test_fp16_inputs_are_scaled_into_its_range() -> None:
    # a * b * c at ±100 is 1e6: beyond fp16, on both sides; the check scales the draw down, so the
    # reassociation is compared on values fp16 holds (and stays safe), and the factor shows in failures
    abc = rule(ABC, lambda b, a, b_, c: b.emit("mul", b.emit("mul", a, b_), c),
               lambda b, a, b_, c: b.emit("mul", a, b.emit("mul", b_, c)))
    result = check_float_safety(*abc, precisions=("fp16",))
    assert result.forward and result.backward, result.detail
    assert F.PLUS.factor("fp16") == 2.0**-4 and F.PLUS.factor("bf16") == 1.0 and F.N01.factor("fp16") == 1.0
    planted = check_float_safety(*distributes("mul"), precisions=("fp16",))
    assert not planted.forward and " x2^-4: " in planted.detail, planted.detail


@dataclass(frozen=True)
class Symbol:
    name: str
    constraint: str | None


def test_symbols_are_drawn_with_their_sign() -> None:
    # abs(c) = c holds only for c > 0 (and -c only for c < 0): drawn with the wrong sign it fails at once
    c = [("c", ())]
    is_c = rule(c, lambda b, x: b.emit("abs", x), lambda b, x: x)
    is_minus_c = rule(c, lambda b, x: b.emit("abs", x), lambda b, x: b.emit("neg", x))
    assert check_float_safety(*is_c, symbols=[Symbol("c", ">0")]).forward
    assert check_float_safety(*is_c, symbols=[Symbol("c", ">=0")]).forward
    assert check_float_safety(*is_minus_c, symbols=[Symbol("c", "<0")]).forward
    assert not check_float_safety(*is_c).forward  # an ordinary rank-0 input takes both signs
    assert not check_float_safety(*is_c, symbols=[Symbol("c", None)]).forward
    assert not check_float_safety(*is_c, symbols=[Symbol("c", "<0")]).forward
    # and at realistic magnitudes: 1e-2..1e2, or near 100 in the ±100 trials
    lhs, _ = rule([("a", ("M", "N")), ("c", ())], lambda b, a, x: b.emit("mul", a, x), lambda b, a, x: a)
    draw = F._Inputs(lhs, lhs, [Symbol("c", "<0")])
    rng = np.random.default_rng(0)
    for scale in F.SCALES:
        got = draw([lhs.bind(M=2, N=3)] * 2, rng, scale, {"a": -1.0})
        assert got["c"].shape == () and got["c"] < 0, scale
        assert 1e-2 <= -got["c"] <= 1e2 or (scale.loc and 90 < -got["c"] < 110), (scale, got["c"])


def test_positive_inputs_stay_positive_at_every_scale() -> None:
    lhs, rhs = rule([("x", ("M", "N"))], lambda b, x: b.emit("log", b.emit("sqrt", x)),
                    lambda b, x: b.emit("mul", b.emit("log", x), b.constant(0.5, "fp32")))
    draw = F._Inputs(lhs, rhs, ())
    rng = np.random.default_rng(1)
    for scale in F.SCALES:
        got = draw([lhs.bind(M=4, N=50)] * 2, rng, scale, {"x": -1.0})["x"]
        assert (got > 0).all(), scale
    assert check_float_safety(lhs, rhs).forward


def test_recheck_names_a_changed_verdict() -> None:
    lhs, rhs = distributes("mul")
    assert recheck(lhs, rhs, (), {"forward": False, "backward": True, "detail": "old"}) is None
    why = recheck(lhs, rhs, (), {"forward": True, "backward": True})
    assert why is not None and why.startswith("forward safe -> unsafe (forward: bf16 trial") and "\n" not in why
    why = recheck(*rule(ABC, lambda b, a, b_, c: b.emit("add", a, b_), lambda b, a, b_, c: b.emit("add", b_, a)), (),
                  {"forward": True, "backward": False})
    assert why == "backward unsafe -> safe (safe both ways: 22 trials in fp32, bf16, fp16)"


def test_deterministic_for_a_seed_and_probes_several_scales() -> None:
    pair = rule(MN, softmax_shifted, softmax_unshifted)
    assert check_float_safety(*pair, seed=3) == check_float_safety(*pair, seed=3)
    cancel = distributes("div")
    assert check_float_safety(*cancel, seed=5) == check_float_safety(*cancel, seed=5)
    scales = probe_scales()
    assert len(scales) >= 3 and max(s.loc + s.spread for s in scales) >= 100
    assert {s.signs for s in scales} >= {"+", "-", "split", "mixed"} and any(s.uniform for s in scales)
    assert set(F.SCHEDULE) == set(scales)
    # with only tame inputs (the first trial: N(0,1)) the overflow is not seen
    assert check_float_safety(*pair, trials=1).forward


@settings(max_examples=min(settings.default.max_examples, 30))
@given(programs(max_nodes=5, bound=False))
def test_a_program_against_its_canonical_form_is_safe(program: Program) -> None:
    result = check_float_safety(program, program.canonical(), trials=8)
    assert result.forward and result.backward, f"{result.detail}\n{program}"


def test_sides_must_agree_on_output_shapes() -> None:
    mm = [("A", ("M", "K")), ("B", ("K", "N"))]
    lhs, rhs = rule(mm, lambda b, a, w: b.emit("sum", b.emit("matmul", a, w), axes=(0,), keepdims=True),
                    lambda b, a, w: b.emit("matmul", a, b.emit("sum", w, axes=(1,), keepdims=True)))
    with pytest.raises(ProgramError, match="shape"):
        check_float_safety(lhs, rhs)
