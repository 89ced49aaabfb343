"""Partial functions in the prover: domain conditions, and equality that includes definedness.

- the conditions a normal form carries are complete: on random programs with inputs of mixed sign and
  zeros, wherever the float64 reference is NaN or inf, some condition fails (a missed condition, e.g.
  one cancelled away with its term, would let the prover call a NaN-producing rewrite equal);
- planted wrong identities of the partial-function kind (sqrt / log / division domains) are refuted
  with a counterexample that names the side that is not finite, or are unknown; never proved, neither
  with the NumPy search nor by the symbolic path alone;
- true identities whose sides have the same domain (possibly after Z3: log(min(a, b)) needs
  min(a, b) > 0, which a > 0 and b > 0 imply) are still proved;
- on random programs, a mutant that is NaN where the program is defined (``exp(log(out))``,
  ``out * (out / out)``, ...) is never proved equal by the symbolic path.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from axon_eg.ir import ops as O
from axon_eg.ir.builder import Builder, Value
from axon_eg.ir.inputs import mixed_inputs, nonzero_inputs, positive_inputs, random_inputs
from axon_eg.ir.interpret import interpret
from axon_eg.ir.program import Program
from axon_eg.semantics import domains, nf
from axon_eg.semantics.numeric import PolyEvaluator, evaluate_ix
from axon_eg.semantics.op_semantics import Evaluator
from axon_eg.semantics.prover import ScalarSymbol, numeric_search, prove_equal, trial_inputs
from axon_eg.testing.strategies import make_inputs, programs

HEAVY = (O.OpKind.REDUCE, O.OpKind.SCAN, O.OpKind.CONTRACTION, O.OpKind.LIBRARY)
MAX_DEPTH = 3  # reductions on one path (normal forms grow fast with it)


def reduction_depth(p: Program) -> int:
    depth: list[int] = []
    for n in p.nodes:
        depth.append(max((depth[j] for j in n.inputs), default=0) + (O.get(n.op).kind in HEAVY))
    return max(depth[o] for o in p.outputs)


class Emit:
    """``e("log", x)`` emits an op, ``e.c(1.0)`` a constant."""

    def __init__(self, b: Builder):
        self.b = b

    def __call__(self, op: str, *xs: Value, **attrs: Any) -> Value:
        return self.b.emit(op, *xs, **attrs)

    def c(self, v: float) -> Value:
        return self.b.constant(v, "fp32")


def program(inputs: dict[str, tuple], body: Callable[..., Value]) -> Program:
    b = Builder("case")
    values = {n: b.input(n, shape, "fp32") for n, shape in inputs.items()}
    return b.build(body(Emit(b), **values)).expand()


def domain_of(p: Program, which: int = 0) -> list[str]:
    return sorted(domains.condition_str(c) for c in Evaluator(p).domain(which))


# ------------------------------------------------------------------------------------------------
# The conditions themselves
# ------------------------------------------------------------------------------------------------
X, XY, MN = {"x": ("N",)}, {"x": ("N",), "y": ("N",)}, {"x": ("M", "N")}


@pytest.mark.parametrize("inputs,body,want", [
    (X, lambda e, x: e("log", x), ["1 * x[i0] > 0"]),
    (X, lambda e, x: e("sqrt", x), ["1 * x[i0] >= 0"]),
    (X, lambda e, x: e("rsqrt", x), ["1 * x[i0] > 0"]),  # sqrt(x) != 0 and x >= 0
    (X, lambda e, x: e("reciprocal", e("sqrt", x)), ["1 * x[i0] > 0"]),
    (X, lambda e, x: e("reciprocal", x), ["1 * x[i0] != 0"]),
    (XY, lambda e, x, y: e("div", x, e("mul", y, e("exp", x))), ["1 * y[i0] != 0"]),  # exp(x) is never 0
    (X, lambda e, x: e("pow", x, exponent=-2.0), ["1 * x[i0] != 0"]),
    (X, lambda e, x: e("pow", x, exponent=1.5), ["1 * x[i0] >= 0"]),
    (X, lambda e, x: e("pow", x, exponent=-1.5), ["1 * x[i0] > 0"]),
    (X, lambda e, x: e("pow", x, exponent=5.0), []),
    (X, lambda e, x: e("log", e("mul", x, e("exp", x))), ["1 * x[i0] > 0"]),  # log(x exp(x)) = x + log(x)
    (X, lambda e, x: e("log", e("exp", x)), []),
    (X, lambda e, x: e("sub", e("log", x), e("log", x)), ["1 * x[i0] > 0"]),  # cancelled, still required
    (X, lambda e, x: e("mul", e("sqrt", x), e("sub", x, x)), ["1 * x[i0] >= 0"]),  # sqrt(x) * 0
    (X, lambda e, x: e("mul", e("log", x), e.c(0.0)), ["1 * x[i0] > 0"]),
    (X, lambda e, x: e("sigmoid", x), []),
    (X, lambda e, x: e("softplus", x), []),
    (MN, lambda e, x: e("softmax", x, axis=1), []),
    (MN, lambda e, x: e("log_softmax", x, axis=1), []),
    (MN, lambda e, x: e("mean", x, axes=(1,)), []),  # a dim count is >= 1
    (MN, lambda e, x: e("sum", e("log", x), axes=(1,)), ["for b0 < N: 1 * x[i0, b0] > 0"]),
    (MN, lambda e, x: e("max", e("sqrt", x), axes=(0, 1)), ["for b0 < M, b1 < N: 1 * x[b0, b1] >= 0"]),
    (MN, lambda e, x: e("log", e("max", x, axes=(1,))), ["1 * max[b0<N](1 * x[i0, b0]) > 0"]),
    (XY, lambda e, x, y: e("maximum", e("log", x), y), ["1 * x[i0] > 0"]),  # NaN propagates through maximum
])
def test_conditions(inputs: dict, body: Callable, want: list[str]) -> None:
    assert domain_of(program(inputs, body)) == want


def test_concat_and_causal_mask_conditions_are_guarded() -> None:
    """A part of a concat is required only where it is selected; a masked-out element not at all."""
    cat = program({"x": ("M", "N"), "y": ("M", "K")}, lambda e, x, y: e("concat", e("log", x), e("sqrt", y), axis=1))
    assert domain_of(cat) == ["1 * ('ite', ('<', i1, N), 1 * x[i0, i1], 1) > 0",
                              "1 * ('ite', ('<=', N, i1), 1 * y[i0, -1*N + i1], 1) >= 0"]
    mask = program({"x": ("N", "N")}, lambda e, x: e("causal_mask", e("log", x), diagonal=0, fill=-1.0))
    assert domain_of(mask) == ["1 * ('ite', ('<=', -1*i0 + i1, 0), 1 * x[i0, i1], 1) > 0"]


def test_library_condition_is_opaque() -> None:
    conv = program({"x": (1, 2, "N"), "w": (2, 3, 2)},
                   lambda e, x, w: e("conv_transpose1d", e("log", x), w, padding=1))
    (c,) = Evaluator(conv).domain(0)
    assert c[1] == "lib" and "x[l0, l1, l2] > 0" in domains.condition_str(c)


def test_conv_conditions_hold_where_the_read_is_inside_the_input() -> None:
    """A convolution has element semantics: its input's conditions are required for every channel and
    kernel offset it reads, but not at the padding (a read outside the input is a zero, no log)."""
    conv = program({"x": (1, 2, "N"), "w": (3, 2, 2)}, lambda e, x, w: e("conv1d", e("log", x), w, padding=1))
    (c,) = Evaluator(conv).domain(0)
    assert c[1] == ">0" and len(c[2]) == 2  # for every input channel and kernel offset ...
    text = domains.condition_str(c)
    assert text.startswith("for b0 < 2, b1 < 2: 1 * ('ite', ('<', b0 + i2 + -1, 0), 1, ")  # ... where the read
    assert "('<', b0 + i2 + -1, N), 1 * x[i0, b1, b0 + i2 + -1], 1)" in text  # is inside [0, N)
    unpadded = program({"x": (1, 2, "N"), "w": (3, 2, 2)}, lambda e, x, w: e("conv1d", e("log", x), w))
    (c,) = Evaluator(unpadded).domain(0)
    assert "ite" not in domains.condition_str(c)  # without padding every read is inside


def test_binders_are_canonical() -> None:
    """The same reduction built twice (fresh bound names each time) has one condition."""
    body = lambda e, x: e("add", e("sum", e("log", x), axes=(1,)), e("sum", e("log", x), axes=(1,)))  # noqa: E731
    assert domain_of(program(MN, body)) == ["for b0 < N: 1 * x[i0, b0] > 0"]
    a = Evaluator(program(MN, lambda e, x: e("sum", e("log", e("transpose", x, perm=(1, 0))), axes=(0,)))).domain(0)
    b = Evaluator(program(MN, lambda e, x: e("sum", e("log", x), axes=(1,)))).domain(0)
    assert a == b


# -- completeness against the reference -----------------------------------------------------------
PARTIAL_HEAVY = ["log", "sqrt", "rsqrt", "reciprocal", "div", "pow", "exp", "add", "sub", "mul", "maximum",
                 "minimum", "relu", "abs", "clamp", "sum", "max", "mean", "cumsum", "matmul", "transpose", "concat",
                 "slice", "broadcast_to", "reshape", "causal_mask", "softmax", "layernorm", "tanh", "sigmoid"]


def perturbed_inputs(p: Program, seed: int) -> dict[str, np.ndarray]:
    """Tame inputs (``make_inputs``) with a quarter of the elements negated and an eighth set to 0: the
    magnitudes stay inside the strategy's envelopes (nothing overflows), only domains are left."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, x in make_inputs(p, seed).items():
        u = rng.uniform(size=np.shape(x))
        out[name] = np.asarray(np.where(u < 0.125, 0.0, np.where(u < 0.375, -x, x)), dtype=np.float64)
    return out


def holds(c: nf.Atom, ev: PolyEvaluator, env: dict[str, int]) -> bool | None:
    """Whether a condition holds at concrete dims, inputs and indices (None: a library op's condition)."""
    rel, binders, body = c[1], c[2], c[3]
    if rel == "lib":
        return None
    if binders:
        ready = [(v, n) for v, n in binders if n.symbols() <= set(env) | set(ev.dims)]
        v, n = ready[0]
        rest = tuple(b for b in binders if b[0] != v)
        results = [holds(("dom", rel, rest, body), ev, {**env, v: k}) for k in range(evaluate_ix(n, {**ev.dims, **env}))]
        return None if None in results else all(results)
    value = ev.evaluate(body, env)
    if math.isnan(value):
        return False
    return {">0": value > 0, ">=0": value >= 0, "!=0": value != 0}[rel]


def defined(conds: frozenset, ev: PolyEvaluator, env: dict[str, int]) -> bool | None:
    results = [holds(c, ev, env) for c in conds]
    if False in results:
        return False
    return None if None in results else True


def output_points(shape: tuple[int, ...], rng: np.random.Generator, most: int = 24) -> list[tuple[int, ...]]:
    if int(np.prod(shape)) <= most:
        return list(np.ndindex(shape))
    return [tuple(int(rng.integers(0, n)) for n in shape) for _ in range(most)]


@settings(max_examples=3 * settings.default.max_examples)
@given(p=programs(ops=PARTIAL_HEAVY, bound=True, symbolic=True, max_nodes=6), seed=st.integers(0, 2**32 - 1))
def test_not_finite_only_where_a_condition_fails(p: Program, seed: int) -> None:
    """Where the reference is NaN or inf (inputs of mixed sign, with zeros), a domain condition fails."""
    expanded = p.expand()
    assume(reduction_depth(expanded) <= MAX_DEPTH)
    inputs = perturbed_inputs(p, seed)
    with np.errstate(all="ignore"):
        reference = interpret(p, inputs)
    reference = reference if isinstance(reference, tuple) else (reference,)
    evaluator = Evaluator(expanded)
    numeric = PolyEvaluator(p.bindings, inputs)
    rng = np.random.default_rng(seed)
    for k, out in enumerate(reference):
        conds = evaluator.domain(k, prefix=f"o{k}_")
        for at in output_points(out.shape, rng):
            if np.isfinite(out[at]):
                continue
            env = {f"o{k}_{a}": v for a, v in enumerate(at)}
            verdict = defined(conds, numeric, env)
            event(f"a non-finite output element: conditions {'unknown (library op)' if verdict is None else 'fail'}")
            assert verdict is not True, (
                f"output {k} is {out[at]} at {list(at)} but every condition holds\n{p}\ninputs {inputs}\n"
                f"conditions: {[domains.condition_str(c) for c in conds]}")


# ------------------------------------------------------------------------------------------------
# prove_equal: planted wrong identities of the partial-function kind
# ------------------------------------------------------------------------------------------------
WRONG = [  # (name, inputs, lhs, rhs, the side that is NaN / inf where the other is finite, or None: never finite-visible)
    ("max of sqrts is sqrt of the max", XY, lambda e, x, y: e("maximum", e("sqrt", x), e("sqrt", y)),
     lambda e, x, y: e("sqrt", e("maximum", x, y)), "lhs"),
    ("exp inverts log", X, lambda e, x: e("exp", e("log", x)), lambda e, x: x, "lhs"),
    ("log of a product", XY, lambda e, x, y: e("log", e("mul", x, y)), lambda e, x, y: e("add", e("log", x), e("log", y)),
     "rhs"),
    ("sqrt of a product", XY, lambda e, x, y: e("sqrt", e("mul", x, y)), lambda e, x, y: e("mul", e("sqrt", x), e("sqrt", y)),
     "rhs"),
    ("sqrt squared", X, lambda e, x: e("mul", e("sqrt", x), e("sqrt", x)), lambda e, x: x, "lhs"),
    ("x / x is 1", XY, lambda e, x, y: e("mul", e("div", x, x), y), lambda e, x, y: y, "lhs"),
    ("x y / y is x", XY, lambda e, x, y: e("div", e("mul", x, y), y), lambda e, x, y: x, "lhs"),
    ("max of logs is log of the max", MN, lambda e, x: e("max", e("log", x), axes=(1,)),
     lambda e, x: e("log", e("max", x, axes=(1,))), "lhs"),
    ("relu of a log is the log of a max with 1", X, lambda e, x: e("relu", e("log", x)),  # equal where x > 0
     lambda e, x: e("log", e("maximum", x, e.c(1.0))), "lhs"),
    ("log of a square is twice the log", X, lambda e, x: e("log", e("mul", x, x)), lambda e, x: e("mul", e("log", x), e.c(2.0)),
     "rhs"),
    # 1/(1/0) = 0 in float64: no finite-vs-NaN witness, only the domains differ
    ("reciprocal is an involution", X, lambda e, x: e("reciprocal", e("reciprocal", x)), lambda e, x: x, None),
    ("reciprocal involution under a sum", MN, lambda e, x: e("sum", e("reciprocal", e("reciprocal", x)), axes=(1,)),
     lambda e, x: e("sum", x, axes=(1,)), None),
]


@pytest.mark.parametrize("name,inputs,lhs,rhs,side", WRONG, ids=[w[0] for w in WRONG])
def test_wrong_partial_identity_is_never_proved(name: str, inputs: dict, lhs: Callable, rhs: Callable,
                                                side: str | None) -> None:
    left, right = program(inputs, lhs), program(inputs, rhs)
    result = prove_equal(left, right)
    assert result.status != "proven", f"{name}: proved by {result.method}"
    if side is not None:
        assert result.status == "refuted", f"{name}: {result.status} ({result.detail})"
        other = "rhs" if side == "lhs" else "lhs"
        assert f"the {side} is not finite where the {other} is" in result.detail, result.detail
        cex = result.counterexample
        assert cex is not None and cex.inputs in ("mixed", "boundary")
        bound = left.bind(cex.dims), right.bind(cex.dims)
        with np.errstate(all="ignore"):
            a, b = (interpret(s, trial_inputs(bound[0], left, right, (), cex.seed, cex.inputs)) for s in bound)
        assert not np.array_equal(np.isfinite(a), np.isfinite(b))
    else:
        assert result.status == "unknown" and result.method == "domain", f"{name}: {result.status} {result.detail}"
    symbolic = prove_equal(left, right, numeric=False)
    assert symbolic.status == "unknown" and symbolic.method == "domain", f"{name}: {symbolic}"


def test_domain_mismatch_names_the_condition() -> None:
    result = prove_equal(program(X, lambda e, x: e("reciprocal", e("reciprocal", x))), program(X, lambda e, x: x))
    assert result.detail == "the lhs is defined only where 1 * x[o0_0] != 0, which the rhs's domain does not imply"


def test_symbol_constraint_discharges_a_denominator() -> None:
    """x / c for a symbolic scalar c > 0 needs nothing; for an unconstrained c it needs c != 0 on both sides."""
    inputs = {"x": ("M", "N"), "c": ()}
    lhs = program(inputs, lambda e, x, c: e("max", e("div", x, c), axes=(1,)))
    rhs = program(inputs, lambda e, x, c: e("div", e("max", x, axes=(1,)), c))
    assert prove_equal(lhs, rhs, symbols=(ScalarSymbol("c", ">0"),)).proven
    assert not Evaluator(lhs, ["c"], ["c"]).domain(0)
    assert [domains.condition_str(c) for c in Evaluator(lhs, ["c"]).domain(0)] == ["1 * c != 0"]
    assert prove_equal(lhs, rhs, symbols=(ScalarSymbol("c", "<0"),)).status == "refuted"  # max turns into min


# ------------------------------------------------------------------------------------------------
# prove_equal: true identities whose domains agree
# ------------------------------------------------------------------------------------------------
ABC = {"a": ("N",), "b": ("N",), "c": ("N",)}
TRUE = [
    ("log inverts exp", X, lambda e, x: e("log", e("exp", x)), lambda e, x: x),
    ("rsqrt is 1 / sqrt", X, lambda e, x: e("rsqrt", x), lambda e, x: e("reciprocal", e("sqrt", x))),
    ("rsqrt is pow -0.5", X, lambda e, x: e("rsqrt", x), lambda e, x: e("pow", x, exponent=-0.5)),
    ("division distributes over add", ABC, lambda e, a, b, c: e("div", e("add", a, b), c),
     lambda e, a, b, c: e("add", e("div", a, c), e("div", b, c))),
    ("reciprocal of a product", XY, lambda e, x, y: e("reciprocal", e("mul", x, y)),
     lambda e, x, y: e("mul", e("reciprocal", x), e("reciprocal", y))),
    ("log of a min", XY, lambda e, x, y: e("log", e("minimum", x, y)), lambda e, x, y: e("minimum", e("log", x), e("log", y))),
    ("sqrt of a min", XY, lambda e, x, y: e("sqrt", e("minimum", x, y)),
     lambda e, x, y: e("minimum", e("sqrt", x), e("sqrt", y))),
    ("abs of a quotient", XY, lambda e, x, y: e("abs", e("div", x, y)), lambda e, x, y: e("div", e("abs", x), e("abs", y))),
    ("log through concat", {"x": ("M", "N"), "y": ("M", "K")}, lambda e, x, y: e("log", e("concat", x, y, axis=1)),
     lambda e, x, y: e("concat", e("log", x), e("log", y), axis=1)),
    ("sum of logs through transpose", MN, lambda e, x: e("sum", e("log", e("transpose", x, perm=(1, 0))), axes=(0,)),
     lambda e, x: e("sum", e("log", x), axes=(1,))),
    ("mean of a quotient by a row constant", {"a": ("M", "N"), "c": ("M", 1)},
     lambda e, a, c: e("mean", e("div", a, c), axes=(1,), keepdims=True), lambda e, a, c: e("div", e("mean", a, axes=(1,),
                                                                                                       keepdims=True), c)),
    ("softmax max-shift invariance", MN, lambda e, x: e("softmax", x, axis=1),
     lambda e, x: e("div", e("exp", x), e("sum", e("exp", x), axes=(1,), keepdims=True))),
    ("log_softmax", MN, lambda e, x: e("log_softmax", x, axis=1),
     lambda e, x: e("sub", x, e("log", e("sum", e("exp", x), axes=(1,), keepdims=True)))),
]


@pytest.mark.parametrize("name,inputs,lhs,rhs", TRUE, ids=[t[0] for t in TRUE])
def test_true_identity_with_matching_domains_is_proved(name: str, inputs: dict, lhs: Callable, rhs: Callable) -> None:
    result = prove_equal(program(inputs, lhs), program(inputs, rhs))
    assert result.proven, f"{name}: {result.status} by {result.method}: {result.detail}"


# ------------------------------------------------------------------------------------------------
# The NumPy search and its inputs
# ------------------------------------------------------------------------------------------------
def test_inputs_respect_both_sides_domains() -> None:
    lhs = program(XY, lambda e, x, y: e("div", e("log", x), y))
    rhs = program(XY, lambda e, x, y: e("mul", e("sqrt", y), e("reciprocal", x)))
    assert positive_inputs(lhs) == {"x"} and positive_inputs(lhs, rhs) == {"x", "y"}
    assert nonzero_inputs(lhs) == {"y"} and nonzero_inputs(lhs, rhs) == {"x", "y"}
    drawn = random_inputs(lhs.bind(N=50), seed=1, domain_of=(lhs, rhs))
    assert (drawn["x"] >= 0.5).all() and (drawn["y"] >= 0.5).all()
    denominators = random_inputs(lhs.bind(N=50), seed=1, domain_of=(lhs,))["y"]
    assert (np.abs(denominators) >= 0.5).all() and (denominators < 0).any()
    assert np.array_equal(random_inputs(lhs.bind(N=5), seed=2)["x"], random_inputs(lhs.bind(N=5), seed=2, domain_of=(lhs,))["x"])
    boundary = mixed_inputs(lhs.bind(N=200), seed=0, boundary=True)["x"]
    assert (boundary == 0).any() and (boundary < 0).any()


def test_search_skips_mixed_trials_for_total_programs(monkeypatch: Any) -> None:
    """A program without partial functions never meets a domain: the search stays at its 6 trials."""
    from axon_eg.semantics import prover

    seen = []
    real = prover.trial_inputs
    monkeypatch.setattr(prover, "trial_inputs", lambda *a, **k: seen.append(a[-1]) or real(*a, **k))
    tanh = program(X, lambda e, x: e("tanh", x))
    assert numeric_search(tanh, tanh) is None and seen == ["domain"] * 6
    seen.clear()
    log = program(X, lambda e, x: e("log", x))
    assert numeric_search(log, log) is None and seen == ["domain"] * 6 + ["mixed", "boundary"] * 2


# ------------------------------------------------------------------------------------------------
# Random programs: a mutant that is NaN where the program is defined is never proved equal
# ------------------------------------------------------------------------------------------------
MUTANTS: dict[str, Callable[[Callable, Value], Value]] = {
    "exp(log(out))": lambda e, o: e("exp", e("log", o)),
    "sqrt(out)^2": lambda e, o: e("mul", e("sqrt", o), e("sqrt", o)),
    "out * (out / out)": lambda e, o: e("mul", o, e("div", o, o)),
    "out + log(out) * 0": lambda e, o: e("add", o, e("mul", e("log", o), e("sub", o, o))),
}


def _with_output(p: Program, wrap: Callable[[Callable, Value], Value]) -> Program:
    """``p`` (expanded) with its first output wrapped."""
    b = Builder("mutant")
    values: list[Value] = []
    for n in p.nodes:
        if n.op == "input":
            values.append(b.input(n.attrs["name"], n.shape, n.dtype))
        else:
            values.append(b.emit(n.op, *[values[j] for j in n.inputs], **dict(n.attrs)))
    outs = [values[o] for o in p.outputs]
    outs[0] = wrap(lambda op, *xs, **attrs: b.emit(op, *xs, **attrs), outs[0])
    return b.build(outs)


@settings(max_examples=2 * settings.default.max_examples)
@given(p=programs(ops=PARTIAL_HEAVY, bound=True, symbolic=True, max_nodes=5), mutant=st.sampled_from(sorted(MUTANTS)),
       seed=st.integers(0, 2**32 - 1))
def test_symbolic_path_never_proves_a_definedness_mutant(p: Program, mutant: str, seed: int) -> None:
    """Where the program is defined (every condition holds) and the mutant is not finite, the domains
    differ: the normal forms, Z3 and induction (no NumPy search) must not prove them equal."""
    expanded = p.expand()
    assume(reduction_depth(expanded) <= MAX_DEPTH)
    other = _with_output(expanded, MUTANTS[mutant])
    inputs = perturbed_inputs(p, seed)
    with np.errstate(all="ignore"):
        a, b = interpret(p, inputs), interpret(other.bind(p.bindings), inputs)
    a, b = (a[0] if isinstance(a, tuple) else a), (b[0] if isinstance(b, tuple) else b)
    conds = Evaluator(expanded).domain(0, prefix="o0_")
    numeric = PolyEvaluator(p.bindings, inputs)
    rng = np.random.default_rng(seed)
    witness = [at for at in output_points(a.shape, rng) if not np.isfinite(b[at])
               and defined(conds, numeric, {f"o0_{k}": v for k, v in enumerate(at)})]
    assume(witness)
    unbound = Program(expanded.nodes, expanded.outputs, (), expanded.name, expanded.roles)
    result = prove_equal(unbound, other, numeric=False, timeout_ms=500)
    event(f"{result.status} by {result.method}")
    assert result.status != "proven", f"proved {p}\nequal to its mutant {mutant} ({result.method}), defined at {witness[0]}"


def test_every_partial_op_is_drawn() -> None:
    assert {"log", "sqrt", "rsqrt", "reciprocal", "div", "pow"} <= {n for n in PARTIAL_HEAVY if n in O.REGISTRY}


# ------------------------------------------------------------------------------------------------
# Guards and swallowed NaN: where / comparisons over partial functions, at signed zeros and guard values
# ------------------------------------------------------------------------------------------------
POOL = (-5.0, -4.5, -4.0, -1.5, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 1.5, 2.0, 4.5)
UNARY_GUARDED = ("log", "sqrt", "rsqrt", "reciprocal", "neg", "abs", "square", "relu", "sigmoid", "tanh", "softplus",
                 "leaky_relu", "pow0", "pow0.5", "pow-0.5", "pow-1", "pow3", "pow1.5", "pow-1.5", "clamp", "bool")
BINARY_GUARDED = ("add", "sub", "mul", "div", "maximum", "minimum")
COMPARE = ("gt", "lt", "ge", "le", "eq", "ne")


def _expressions() -> st.SearchStrategy:
    leaves = st.one_of(st.sampled_from([("x",), ("y",)]), st.sampled_from(POOL).map(lambda v: ("c", v)),
                       st.sampled_from([("exp", ("x",)), ("exp", ("y",))]))  # exp of a leaf only: nothing overflows

    def grow(inner: st.SearchStrategy) -> st.SearchStrategy:
        return st.one_of(st.tuples(st.sampled_from(UNARY_GUARDED), inner),
                         st.tuples(st.sampled_from(BINARY_GUARDED), inner, inner),
                         st.tuples(st.just("where"), st.sampled_from(COMPARE), inner, st.sampled_from(POOL), inner, inner))

    return st.recursive(leaves, grow, max_leaves=7)


def _emit(e: Callable, expr: tuple, x: Value, y: Value) -> Value:
    head = expr[0]
    if head in ("x", "y"):
        return x if head == "x" else y
    if head == "c":
        return e.c(expr[1])
    if head == "where":
        _, cmp, a, v, t, f = expr
        return e("where", e(cmp, _emit(e, a, x, y), e.c(v)), _emit(e, t, x, y), _emit(e, f, x, y))
    args = [_emit(e, a, x, y) for a in expr[1:]]
    if head.startswith("pow"):
        return e("pow", *args, exponent=float(head[3:]))
    if head == "clamp":
        return e("clamp", *args, lo=-1.0, hi=2.0)
    if head == "bool":
        return e("cast", e("cast", *args, dtype="bool"), dtype="fp32")
    return e(head, *args)


def _kind(v: float) -> str:
    from axon_eg.semantics import nonfinite

    if math.isnan(v):
        return nonfinite.NAN
    if math.isinf(v):
        return nonfinite.PINF if v > 0 else nonfinite.NINF
    return nonfinite.FINITE


@given(expr=_expressions(), seed=st.integers(0, 2**32 - 1))
def test_guards_and_swallowed_nan_against_the_reference(expr: tuple, seed: int) -> None:
    """Element-wise programs of where / comparisons over partial functions, at guard values and signed
    zeros: where every condition holds the reference is finite (a where requires its branch only where
    it is selected, yet all it needs); where one fails, the reference's value is of a kind
    ``Evaluator.outside`` allows (NaN, +inf, -inf or finite): a side it calls never finite there is not."""
    p = program(XY, lambda e, x, y: _emit(e, expr, x, y))
    assume(p.nodes[p.outputs[0]].shape)  # not a constant
    rng = np.random.default_rng(seed)
    n = 16
    inputs = {k: rng.choice(np.asarray(POOL), size=n) for k in ("x", "y")}
    with np.errstate(all="ignore"):
        out = np.asarray(interpret(p.bind(N=n), inputs), dtype=np.float64)
    evaluator = Evaluator(p)
    conds = evaluator.domain(0)
    kinds, why = evaluator.outside(0)
    numeric = PolyEvaluator({"N": n}, inputs)
    for at in range(n):
        verdict = defined(conds, numeric, {"i0": at})
        if verdict is True:
            assert np.isfinite(out[at]), f"{p}\nis {out[at]} at {at} ({inputs['x'][at]}, {inputs['y'][at]}) where defined"
        elif verdict is False:
            assert _kind(out[at]) in kinds, (f"{p}\nis {out[at]} at {at} ({inputs['x'][at]}, {inputs['y'][at]}) "
                                            f"outside its domain; kinds {sorted(kinds)} ({why})")
