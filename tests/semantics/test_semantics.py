"""The prover's semantics checked against the float64 reference, and the prover on known identities.

- every registry op has semantics (a new op without them fails here);
- random programs (``testing.strategies.programs``): each output's normal form, evaluated numerically
  by ``semantics.numeric`` at random output indices, equals ``interpret`` there;
- the lemma library proves, and each lemma's *statement* also holds on random arrays;
- ``prove_equal`` proves true identities over symbolic dims, and refutes planted unsound ones with a
  counterexample that replays in the reference interpreter; without the NumPy search, the symbolic
  path never proves an unsound one, nor a random program equal to a mutant of it that computes
  something else.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, reject, settings
from hypothesis import strategies as st

from axon_eg.ir import dims as D
from axon_eg.ir import ops as O
from axon_eg.ir.builder import Builder, Value
from axon_eg.ir.interpret import interpret
from axon_eg.ir.program import Program
from axon_eg.semantics import nf
from axon_eg.semantics.lemmas import library
from axon_eg.semantics.numeric import EvaluationError, PolyEvaluator, evaluate_poly
from axon_eg.semantics.op_semantics import Evaluator, has_semantics
from axon_eg.semantics.prover import ProofResult, ScalarSymbol, prove_equal, trial_inputs
from axon_eg.testing.emitter import Emitter
from axon_eg.testing.strategies import SKIPPED_OPS, drawn_ops, make_inputs, programs

PER_OP = settings(max_examples=max(4, settings.default.max_examples // 5))


# ------------------------------------------------------------------------------------------------
# Coverage of the registry
# ------------------------------------------------------------------------------------------------
def test_every_registry_op_has_semantics() -> None:
    missing = [name for name, op in O.REGISTRY.items() if not has_semantics(op)]
    assert not missing, f"ops without prover semantics (add them to semantics/op_semantics.py): {missing}"


def test_an_op_without_semantics_is_reported() -> None:
    fake = O.OpDef("cube_for_semantics_test", O.OpKind.ELEMENTWISE, (1, 1), shape=O.same_shape,
                   dtype=O.same_dtype, reference=lambda xs, a: xs[0] ** 3, meta={"arity": 1})
    assert not has_semantics(fake)


def test_every_primitive_op_is_drawn() -> None:
    """The random-program test below reaches every op that has semantics of its own."""
    drawn = set(drawn_ops(allow_library=True))
    primitive = {name for name, op in O.REGISTRY.items() if op.kind not in (O.OpKind.SOURCE, O.OpKind.COMPOSITE)
                 and name not in SKIPPED_OPS}
    assert primitive <= drawn, sorted(primitive - drawn)


# ------------------------------------------------------------------------------------------------
# Normal forms against the reference interpreter
# ------------------------------------------------------------------------------------------------
HEAVY = (O.OpKind.REDUCE, O.OpKind.SCAN, O.OpKind.CONTRACTION, O.OpKind.LIBRARY)
MAX_DEPTH = 4  # reductions on one path: normal forms grow fast with it (three chained layernorms: 9 MB, 20 s)
BUDGET = 500_000  # numeric evaluation steps per example (a few seconds at most)


def reduction_depth(program: Program) -> int:
    """The most reductions, scans, contractions and library ops on one path to an output."""
    depth: list[int] = []
    for n in program.nodes:
        depth.append(max((depth[j] for j in n.inputs), default=0) + (O.get(n.op).kind in HEAVY))
    return max(depth[o] for o in program.outputs)


class BudgetExceeded(EvaluationError):
    pass


class BudgetedEvaluator(PolyEvaluator):
    """A PolyEvaluator that gives up after ``budget`` steps (monomials and loop iterations); kept out
    of ``semantics/`` because every change there invalidates the rule store's proofs."""

    def __init__(self, *args: Any, budget: int | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.budget, self.steps = budget, 0

    def _step(self) -> None:
        self.steps += 1
        if self.budget is not None and self.steps > self.budget:
            raise BudgetExceeded(f"evaluation took more than {self.budget} steps")

    def mono(self, m: nf.Mono, env: Any) -> Any:
        self._step()
        return super().mono(m, env)

    def _sum(self, binders: Any, factors: Any, env: Any) -> Any:
        self._step()  # once per loop iteration: each one evaluates the remaining binders' sum
        return super()._sum(binders, factors, env)


def check_normal_forms(program: Program, seed: int, points: int = 6, budget: int | None = None) -> None:
    """Each output's normal form (of the expanded, symbolic program, with the bindings as dims) equals
    the reference at every output index of a small output, else at its last index and ``points``
    random ones. With a ``budget`` (evaluation steps), a term too big to evaluate rejects the example."""
    inputs = make_inputs(program, seed)
    reference = interpret(program, inputs)
    reference = reference if isinstance(reference, tuple) else (reference,)
    evaluator = Evaluator(program.expand())
    numeric = BudgetedEvaluator(program.bindings, inputs, budget=budget)
    rng = np.random.default_rng(seed)
    for k, out in enumerate(reference):
        poly, idx = evaluator.output(k, prefix=f"o{k}_")
        assert len(idx) == out.ndim
        finite = out[np.isfinite(out)]
        scale = 1.0 + (float(np.max(np.abs(finite))) if finite.size else 0.0)
        if out.size <= 4 * points:
            where = list(np.ndindex(out.shape))
        else:
            where = [tuple(n - 1 for n in out.shape)]
            where += [tuple(int(rng.integers(0, n)) for n in out.shape) for _ in range(points)]
        for at in where:
            want = float(out[at])
            if not math.isfinite(want):
                continue
            try:
                got = numeric.evaluate(poly, {ix.terms[0][0]: v for ix, v in zip(idx, at)})
            except BudgetExceeded:
                reject()
            assert abs(got - want) <= 1e-9 * (abs(want) + scale), (
                f"output {k} at {list(at)}: semantics give {got!r}, the reference {want!r}\n{program}\n"
                f"normal form: {poly}")


@pytest.mark.parametrize("name", drawn_ops(allow_library=True))
@PER_OP
@given(data=st.data())
def test_each_op_semantics_agree_with_the_reference(name: str, data: st.DataObject) -> None:
    program = data.draw(programs(ops=[name], max_nodes=2, bound=True, symbolic=True))
    assume(reduction_depth(program.expand()) <= MAX_DEPTH)
    check_normal_forms(program, data.draw(st.integers(0, 2**32 - 1)), budget=BUDGET)


@pytest.mark.slow  # 5x the default examples of random programs: 15-35 s (make test-slow, CI)
@settings(max_examples=5 * settings.default.max_examples)
@given(program=programs(bound=True, symbolic=True, allow_library=True, allow_logical=True, max_nodes=6),
       seed=st.integers(0, 2**32 - 1))
def test_random_program_semantics_agree_with_the_reference(program: Program, seed: int) -> None:
    assume(reduction_depth(program.expand()) <= MAX_DEPTH)
    check_normal_forms(program, seed, budget=BUDGET)


# -- every attribute value the strategy draws, and broadcasting in every direction ---------------
UNARY_ATTRS: dict[str, list[dict[str, Any]]] = {
    "leaky_relu": [{"slope": s} for s in (0.01, 0.2, 0.0, 1.5)],
    "softplus": [{"beta": b, "threshold": t} for b in (1.0, 0.5, 2.0) for t in (20.0, 1.0)],
    "clamp": [{"lo": lo, "hi": hi} for lo, hi in ((-1.0, 1.0), (0.0, 6.0), (-math.inf, 0.5), (-0.5, math.inf),
                                                  (0.25, 2.0), (-2.0, -0.5))],
    "pow": [{"exponent": e} for e in (2.0, 0.5, 3.0, -1.0, -0.5, 1.5, -2.0, 0.0, 1.0, 4.0, 2.5)],
    "gelu": [{"approximate": a} for a in ("none", "tanh")],
    "causal_mask": [{"diagonal": d, "fill": f} for d in (-2, 0, 1, 3) for f in (-100.0, 0.0, -math.inf)],
    "cast": [{"dtype": "bf16"}],
}
UNARY_OPS = [op.name for op in O.ops_of_kind(O.OpKind.ELEMENTWISE) if op.meta.get("arity") == 1
             and op.dtype is not O.bitwise]
BINARY_OPS = [op.name for op in O.ops_of_kind(O.OpKind.ELEMENTWISE) if op.meta.get("arity") == 2
              and op.dtype is not O.bitwise]
BIT_OPS = [op.name for op in O.ops_of_kind(O.OpKind.ELEMENTWISE) if op.dtype is O.bitwise]
BROADCASTS = [(("M", "N"), ("M", "N")), (("M", "N"), ("N",)), (("M", 1), (1, "N")), ((), ("M", "N")),
              (("K", 1, "N"), ("M", 1)), ((1,), ("M", "N")), (("M", "N"), ("K", "M", "N"))]


@pytest.mark.parametrize("name", UNARY_OPS)
def test_unary_op_semantics_at_every_attribute(name: str) -> None:
    for attrs in UNARY_ATTRS.get(name, [{}]):
        program = _program({"x": ("M", "N")}, lambda p, x, attrs=attrs: getattr(p, name)(x, **attrs))
        inputs = {"x": np.linspace(-3.0, 3.0, 20).reshape(4, 5)}  # both signs, near the kinks
        if O.get(name).meta.get("positive_inputs"):
            inputs = {"x": np.linspace(0.25, 3.0, 20).reshape(4, 5)}
        check_normal_forms_at(program.bind(M=4, N=5), inputs)


@pytest.mark.parametrize("name", BINARY_OPS)
@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
def test_binary_op_semantics_broadcast(name: str, shapes: tuple[tuple, tuple]) -> None:
    for a, b in (shapes, shapes[::-1]):
        program = _program({"a": a, "b": b}, lambda p, a, b: getattr(p, name)(a, b))
        check_normal_forms(program.bind({d: v for d, v in (("M", 3), ("N", 4), ("K", 2)) if d in program.free_dims}),
                           seed=1, points=30)


@pytest.mark.parametrize("name", BIT_OPS)
@settings(max_examples=20)
@given(data=st.data())
def test_bit_operations_are_functions_of_their_operands(name: str, data: st.DataObject) -> None:
    """The opaque ops (bit operations on integers): an uninterpreted function of the operands, whose value
    at every index, evaluated through the operands' normal forms, is the reference's (negative values,
    shifts past the width included)."""
    m, n = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    b = Builder("bits")
    x, y = b.input("x", ("M", "N"), "int64"), b.input("y", ("N",), "int32")
    operands = [b.emit("add", x, b.constant(3.0, "int64"))] + ([y] if O.get(name).arity[0] == 2 else [])
    program = b.build(b.emit(name, *operands)).bind(M=m, N=n)
    ints = st.integers(-2**40, 2**40)
    inputs = {"x": np.array(data.draw(st.lists(ints, min_size=m * n, max_size=m * n)), dtype=np.float64).reshape(m, n),
              "y": np.array(data.draw(st.lists(st.integers(0, 70), min_size=n, max_size=n)), dtype=np.float64)}
    check_normal_forms_at(program, inputs)


INDEX_OPS = [op.name for op in O.all_ops() if op.meta.get("indices")]


@pytest.mark.parametrize("name", INDEX_OPS)
@settings(max_examples=15)
@given(data=st.data())
def test_index_ops_are_functions_of_their_operands(name: str, data: st.DataObject) -> None:
    """Ops that return or read integer indices (argmax, argsort, topk's indices, gather, index_select): an
    uninterpreted function of their operands' values, which evaluated through the operands' normal forms (a
    computed operand: tanh(x) * 2) equals the reference at every index, on random shapes including 1."""
    m, n = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 5))
    b = Builder("indices")
    x = b.input("x", ("M", "N"), "fp32")
    computed = b.emit("mul", b.emit("tanh", x), b.constant(2.0, "fp32"))
    op = O.get(name)
    if name in ("gather", "index_select"):
        index = b.input("i", ("M", "N") if name == "gather" else ("N",), "int64")
        out = b.emit(name, computed, index, axis=1 if name == "gather" else 0)
    elif name in ("argmax", "argmin"):
        out = b.emit(name, computed, axes=(data.draw(st.integers(0, 1)),))
    else:
        attrs = {"axis": data.draw(st.integers(0, 1))}
        if "k" in {a.name for a in op.attrs}:
            attrs["k"] = data.draw(st.integers(1, (m, n)[attrs["axis"]]))
        out = b.emit(name, computed, **attrs)
    program = b.build(out).bind(M=m, N=n)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    inputs = {"x": rng.standard_normal((m, n))}
    if "i" in {s.name for s in program.inputs}:
        inputs["i"] = rng.integers(0, m if name == "index_select" else n, (m, n) if name == "gather" else (n,)).astype(np.float64)
    check_normal_forms_at(program, inputs)


@pytest.mark.parametrize("shape,target", [((1, "N"), ("K", "M", "N")), (("M", 1), ("M", "N")), ((), ("M", "N")),
                                          (("N",), ("M", 1, "N"))])
def test_broadcast_to_semantics(shape: tuple, target: tuple) -> None:
    program = _program({"x": shape}, lambda p, x: p.exp(p.broadcast_to(x, shape=target)))
    check_normal_forms(program.bind({d: v for d, v in (("M", 3), ("N", 4), ("K", 2)) if d in program.free_dims}),
                       seed=2, points=30)


def check_normal_forms_at(program: Program, inputs: dict[str, np.ndarray]) -> None:
    """The output's normal form equals the reference at every index, for the given inputs."""
    want = interpret(program, inputs)
    poly, idx = Evaluator(program.expand()).output(0)
    numeric = PolyEvaluator(program.bindings, inputs)
    for at in np.ndindex(want.shape):
        got = numeric.evaluate(poly, {ix.terms[0][0]: v for ix, v in zip(idx, at)})
        if math.isfinite(want[at]) or math.isfinite(got):
            assert got == pytest.approx(want[at], rel=1e-9, abs=1e-12), (program, at, got, want[at])


# -- regressions: normal forms that once were wrong -----------------------------------------------
def _program(inputs: dict[str, tuple], body: Callable[..., Value]) -> Program:
    b = Builder("case")
    values = {n: b.input(n, shape, "fp32") for n, shape in inputs.items()}
    return b.build(body(P(b), **values))


@pytest.mark.parametrize("reduce", ["sum", "max", "min", "mean"])
def test_reduction_of_a_cumsum(reduce: str) -> None:
    """A cumsum's binder runs to the output index: reducing over that index makes a binder whose
    length mentions another binder (once dropped as unused, or left dangling)."""
    program = _program({"x": ("M", "N")}, lambda p, x: getattr(p, reduce)(p.cumsum(p.cumsum(x, axis=1), axis=1),
                                                                           axes=(1,)))
    for n in (1, 3, 4):
        check_normal_forms(program.bind(M=2, N=n), seed=n, points=2)


def test_factor_bound_by_a_sum_stays_inside_a_max() -> None:
    """max_j SUM_k exp(x_k) y[j,k]: exp(x_k) is positive and free of j, but bound by the sum."""
    program = _program({"x": ("K",), "y": ("M", "K")}, lambda p, x, y: p.max(p.sum(p.mul(y, p.exp(x)), axes=(1,))))
    check_normal_forms(program.bind(M=3, K=4), seed=0, points=1)


# ------------------------------------------------------------------------------------------------
# The numeric evaluator itself
# ------------------------------------------------------------------------------------------------
def _x(*idx: Any) -> nf.Poly:
    return nf.Poly.atom(("in", "x", tuple(nf.Ix.of(i) for i in idx)))


def test_evaluate_index_atoms_and_functions() -> None:
    x = np.arange(12.0).reshape(3, 4) + 1
    i = nf.Ix.of("i")
    flat = i.scale(4) + nf.Ix.of("j")  # reshape of x to [12] at index i*4 + j, back through div/mod
    back = nf.Poly.atom(("in", "x", (flat.floordiv(nf.Ix(4)), flat.mod(nf.Ix(4)))))
    assert evaluate_poly(back, {}, {"x": x}, {"i": 2, "j": 1}) == x[2, 1]
    prod = nf.Poly.atom(("dim", nf.Ix.of("M") * nf.Ix.of("N")))  # a ("mul", ...) atom
    assert evaluate_poly(prod, {"M": 3, "N": 5}, {}, {}) == 15.0
    p = nf.fn("pow[1.5]", _x(0, 1)) + nf.fn("erf", _x(0, 0)) + nf.recip(_x(1, 1)).scale(Fraction(1, 2))
    want = x[0, 1] ** 1.5 + math.erf(x[0, 0]) + 0.5 / x[1, 1]
    assert evaluate_poly(p, {}, {"x": x}, {}) == pytest.approx(want, rel=1e-12)
    assert evaluate_poly(nf.fn("sqrt", _x(0, 3)), {}, {"x": x}, {}, uf={"sqrt": lambda v: -v}) == -x[0, 3]
    assert evaluate_poly(nf.Poly.atom(("sym", "c")), {}, {}, {}, symbols={"c": 2.5}) == 2.5
    assert evaluate_poly(nf.Poly.atom(("sym", "-inf")), {}, {}, {}) == -math.inf


def test_evaluate_sums_reductions_and_ite() -> None:
    x = np.random.default_rng(0).standard_normal((3, 4))
    total = nf.sum_over("r", nf.Ix.of("M"), nf.sum_over("c", nf.Ix.of("N"), _x("r", "c")))
    assert evaluate_poly(total, {"M": 3, "N": 4}, {"x": x}, {}) == pytest.approx(x.sum(), rel=1e-12)
    # a binder whose length mentions another one: SUM_{r<M} SUM_{c<=r} x[0, c]
    binders = (("c", nf.Ix.of("r") + 1), ("r", nf.Ix.of("N")))
    tri = nf.Poly((nf.Mono(Fraction(1), binders, (("in", "x", (nf.Ix(0), nf.Ix.of("c"))),)),))
    assert evaluate_poly(tri, {"N": 4}, {"x": x}, {}) == pytest.approx(np.cumsum(x[0]).sum(), rel=1e-12)
    biggest = nf.reduce_max("max", (("c", nf.Ix.of("N")),), _x("i", "c"))
    assert evaluate_poly(biggest, {"N": 4}, {"x": x}, {"i": 1}) == x[1].max()
    relu = nf.ite("<", nf.ZERO, _x("i", 0), _x("i", 0), nf.ZERO)
    assert evaluate_poly(relu, {}, {"x": x}, {"i": 2}) == max(x[2, 0], 0.0)
    mask = nf.ite("<=", nf.Ix.of("j") - nf.Ix.of("i"), nf.Ix(0), _x("i", "j"), nf.Poly.const(-7))
    assert evaluate_poly(mask, {}, {"x": x}, {"i": 0, "j": 1}) == -7.0


def test_evaluate_exp_products_do_not_overflow() -> None:
    """exp(x - m) is exp(x) * exp(-m) in the normal form; log(SUM exp(x)) is the stable logsumexp."""
    x = np.array([[800.0, 801.0, 799.0]])
    b = Builder("lse")
    xv = b.input("x", (1, "N"), "fp32")
    for op in ("softmax", "log_softmax"):
        program = b.build(b.emit(op, xv, axis=1)).bind(N=3)
        want = interpret(program, {"x": x})
        poly, idx = Evaluator(program.expand()).output(0)
        got = [evaluate_poly(poly, {"N": 3}, {"x": x}, {"i0": 0, "i1": j}) for j in range(3)]
        np.testing.assert_allclose(got, want[0], rtol=1e-12)
    program = b.build(b.emit("logsumexp", xv, axes=(1,))).bind(N=3)
    poly, _ = Evaluator(program).output(0)
    assert evaluate_poly(poly, {"N": 3}, {"x": x}, {"i0": 0}) == pytest.approx(interpret(program, {"x": x})[0])


def test_evaluate_library_op() -> None:
    program = _program({"x": (1, 2, "N"), "w": (3, 2, 2)}, lambda p, x, w: p.conv1d(p.relu(x), w, padding=1))
    check_normal_forms(program.bind(N=5), seed=3, points=4)


def test_evaluate_budget() -> None:
    x = np.ones((50, 50))
    total = nf.sum_over("r", nf.Ix.of("M"), nf.sum_over("c", nf.Ix.of("M"), _x("r", "c") * _x("c", "r")))
    assert evaluate_poly(total, {"M": 50}, {"x": x}, {}) == 2500.0
    with pytest.raises(BudgetExceeded):
        BudgetedEvaluator({"M": 50}, {"x": x}, budget=1000).evaluate(total, {})


def test_evaluate_rejects_out_of_range_and_unbound_indices() -> None:
    x = np.ones((2, 2))
    with pytest.raises(EvaluationError, match="out of range"):
        evaluate_poly(_x(0, "i"), {}, {"x": x}, {"i": 2})
    with pytest.raises(EvaluationError, match="out of range"):
        evaluate_poly(_x(0, "i"), {}, {"x": x}, {"i": -1})  # NumPy would wrap around
    with pytest.raises(EvaluationError, match="not bound"):
        evaluate_poly(_x(0, "i"), {}, {"x": x}, {})
    with pytest.raises(EvaluationError, match="no numeric meaning"):
        evaluate_poly(nf.fn("mystery", _x(0, 0)), {}, {"x": x}, {})


# ------------------------------------------------------------------------------------------------
# The lemma library: proved, and each statement checked on random arrays
# ------------------------------------------------------------------------------------------------
class Fn:
    """A function of integer indices (``f``, ``g``, ``H`` of the statements), with pointwise + and *."""

    def __init__(self, call: Callable[..., float]):
        self.call = call

    def __call__(self, *k: int) -> float:
        return self.call(*k)

    def __add__(self, other: Any) -> Fn:
        return Fn(lambda *k: self(*k) + _at(other, k))

    __radd__ = __add__

    def __mul__(self, other: Any) -> Fn:
        return Fn(lambda *k: self(*k) * _at(other, k))

    __rmul__ = __mul__


def _at(x: Any, k: tuple[int, ...]) -> float:
    return x(*k) if callable(x) else x


def Sum(n: int, body: Any) -> float:  # noqa: N802 - the statements' name
    return float(sum(_at(body, (k,)) for k in range(n)))


def _python(statement: str) -> str:
    """A lemma statement as a Python expression: ``x -> e`` lambdas, ``[cond]`` Iverson brackets (a
    factor when followed by a term), ``forall``, ``->`` implication and ``=`` as a comparison."""
    s = re.sub(r"\(forall (\w+)\. (.*?)\) -> ", r"(all(\2 for \1 in range(DOMAIN))) -> ", statement)
    s = re.sub(r"^(.*\)) -> (.*)$", r"(not \1) or (\2)", s)
    s = re.sub(r"\b([a-z]\w*) -> ", r"lambda \1: ", s)

    def bracket(m: re.Match) -> str:
        cond = re.sub(r"(?<![<>=!])=(?!=)", "==", m.group(1))
        return f"(1.0 if ({cond}) else 0.0)" + (" * " if m.group(2) else "")

    s = re.sub(r"\[([^\]]*)\](\s*(?=[\w(]))?", bracket, s)
    parts = s.split(" = ")
    if len(parts) == 2:
        return f"EQUAL({parts[0]}, {parts[1]})"
    assert len(parts) == 1, statement
    return s


DOMAIN = 16


def statement_holds(statement: str, trials: int = 60, seed: int = 0) -> bool:
    code = compile(_python(statement), "<lemma>", "eval")
    rng = np.random.default_rng(seed)
    for t in range(trials):
        f, g = rng.standard_normal(DOMAIN), rng.standard_normal(DOMAIN)
        if t % 2:
            f = np.abs(f) + 0.1  # statements with a positivity premise
        h = rng.standard_normal((DOMAIN, DOMAIN))
        env = {"Sum": Sum, "DOMAIN": DOMAIN, "EQUAL": lambda a, b: math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9),
               "f": Fn(lambda k, f=f: float(f[k])), "g": Fn(lambda k, g=g: float(g[k])),
               "H": Fn(lambda i, j, h=h: float(h[i, j])), "c": float(rng.standard_normal()),
               "n": int(rng.integers(0, 7)), "m": int(rng.integers(0, 7)), "a": int(rng.integers(0, 6)),
               "j": int(rng.integers(-2, 9))}
        if not eval(code, env):
            return False
    return True


EXPECTED_LEMMAS = {"sum_linearity", "sum_additivity", "sum_constant", "sum_swap", "sum_range_split", "sum_delta",
                   "sum_positive"}


def test_lemma_library_proves() -> None:
    lemmas = library()
    names = [lemma.name for lemma in lemmas]
    assert len(names) == len(set(names))
    assert EXPECTED_LEMMAS <= set(names), sorted(EXPECTED_LEMMAS - set(names))


@pytest.mark.parametrize("lemma", library(), ids=lambda lemma: lemma.name)
def test_lemma_statement_holds_numerically(lemma: Any) -> None:
    assert statement_holds(lemma.statement), f"{lemma.name}: {lemma.statement} fails on random arrays"


@pytest.mark.parametrize("wrong", [
    "Sum(n, c*f) = Sum(n, f)",
    "Sum(n, f+g) = Sum(n, f) + Sum(n, f)",
    "Sum(n, c) = c",
    "Sum(n, i -> Sum(m, j -> H(i,j))) = Sum(m, j -> Sum(n, i -> H(j,i)))",
    "Sum(a+n, f) = Sum(a, f) + Sum(n, f)",
    "Sum(n, k -> [k=j] f(k)) = f(j)",
    "(forall k. f(k) > 0) -> Sum(n, f) > 0",
    "Sum(n, k -> f(k) * g(k)) = Sum(n, f) * Sum(n, g)",
])
def test_wrong_lemma_statements_fail_numerically(wrong: str) -> None:
    assert not statement_holds(wrong)


# ------------------------------------------------------------------------------------------------
# prove_equal on true identities and planted unsound candidates
# ------------------------------------------------------------------------------------------------
P = Emitter  # p.matmul(a, b) emits an op, p.c(2.0) a constant


@dataclass(frozen=True)
class Case:
    name: str
    inputs: dict[str, tuple]
    lhs: Callable[..., Value]
    rhs: Callable[..., Value]
    symbols: tuple[ScalarSymbol, ...] = ()

    def programs(self) -> tuple[Program, Program]:
        """Both sides over the same inputs, composites expanded (they have no semantics of their own)."""
        return _program(self.inputs, self.lhs).expand(), _program(self.inputs, self.rhs).expand()


MK, KN, NP, MN, NN = ("M", "K"), ("K", "N"), ("N", "P"), ("M", "N"), ("N", "N")
M, N = D.sym("M"), D.sym("N")
POS_C = (ScalarSymbol("c", ">0"),)  # c: a rank-0 input of both sides
NEG_C = (ScalarSymbol("c", "<0"),)


def _folded_batchnorm(p: P, x: Value, W: Value, mean: Value, var: Value, g: Value, beta: Value) -> Value:
    s = p.mul(g, p.rsqrt(p.add(var, p.c(1e-5))))
    return p.add(p.matmul(x, p.mul(W, s)), p.sub(beta, p.mul(mean, s)))


IDENTITIES = [
    Case("scalar scale through matmul", {"A": MK, "B": KN, "c": ()},
         lambda p, A, B, c: p.matmul(p.mul(A, c), B), lambda p, A, B, c: p.mul(p.matmul(A, B), c), POS_C),
    Case("row scale through matmul", {"A": MK, "B": KN, "r": ("M", 1)},
         lambda p, A, B, r: p.matmul(p.mul(A, r), B), lambda p, A, B, r: p.mul(p.matmul(A, B), r)),
    Case("column scale through matmul", {"A": MK, "B": KN, "s": ("N",)},
         lambda p, A, B, s: p.matmul(A, p.mul(B, s)), lambda p, A, B, s: p.mul(p.matmul(A, B), s)),
    Case("transpose of matmul", {"A": MK, "B": KN},
         lambda p, A, B: p.transpose(p.matmul(A, B), perm=(1, 0)),
         lambda p, A, B: p.matmul(p.transpose(B, perm=(1, 0)), p.transpose(A, perm=(1, 0)))),
    Case("sum over matmul columns", {"A": MK, "B": KN},
         lambda p, A, B: p.sum(p.matmul(A, B), axes=(1,)),
         lambda p, A, B: p.squeeze(p.matmul(A, p.sum(B, axes=(1,), keepdims=True)), axes=(1,))),
    Case("matmul associativity", {"A": MK, "B": KN, "C": NP},
         lambda p, A, B, C: p.matmul(p.matmul(A, B), C), lambda p, A, B, C: p.matmul(A, p.matmul(B, C))),
    Case("sum over add", {"a": MN, "b": MN},
         lambda p, a, b: p.sum(p.add(a, b), axes=(1,)), lambda p, a, b: p.add(p.sum(a, axes=(1,)), p.sum(b, axes=(1,)))),
    Case("mean over add", {"a": MN, "b": MN},
         lambda p, a, b: p.mean(p.add(a, b)), lambda p, a, b: p.add(p.mean(a), p.mean(b))),
    Case("exp of a sum", {"a": MN, "b": MN},
         lambda p, a, b: p.mul(p.exp(a), p.exp(b)), lambda p, a, b: p.exp(p.add(a, b))),
    Case("softmax max-shift invariance", {"x": MN},
         lambda p, x: p.softmax(x, axis=1), lambda p, x: p.div(p.exp(x), p.sum(p.exp(x), axes=(1,), keepdims=True))),
    Case("online softmax rescaling", {"x": MN, "m1": ("M", 1), "m2": ("M", 1)},
         lambda p, x, m1, m2: p.mul(p.exp(p.sub(m1, m2)), p.sum(p.exp(p.sub(x, m1)), axes=(1,), keepdims=True)),
         lambda p, x, m1, m2: p.sum(p.exp(p.sub(x, m2)), axes=(1,), keepdims=True)),
    Case("sum over a size-1 axis", {"x": ("M", 1)}, lambda p, x: p.sum(x, axes=(1,)), lambda p, x: p.reshape(x, shape=("M",))),
    Case("max over a size-1 axis", {"x": ("M", 1, "N")},
         lambda p, x: p.max(x, axes=(1,)), lambda p, x: p.squeeze(x, axes=(1,))),
    Case("last cumsum element is the sum", {"x": MN},
         lambda p, x: p.squeeze(p.slice(p.cumsum(x, axis=1), axis=1, start=D.add(N, -1)), axes=(1,)),
         lambda p, x: p.sum(x, axes=(1,))),
    Case("relu through transpose", {"x": MN},
         lambda p, x: p.relu(p.transpose(x, perm=(1, 0))), lambda p, x: p.transpose(p.relu(x), perm=(1, 0))),
    Case("exp through broadcast_to", {"x": ("N",)},
         lambda p, x: p.exp(p.broadcast_to(x, shape=MN)), lambda p, x: p.broadcast_to(p.exp(x), shape=MN)),
    Case("tanh through reshape", {"x": ("M", "N", 2)},
         lambda p, x: p.tanh(p.reshape(x, shape=("M", D.mul(N, 2)))),
         lambda p, x: p.reshape(p.tanh(x), shape=("M", D.mul(N, 2)))),
    Case("sigmoid through slice", {"x": MN},
         lambda p, x: p.sigmoid(p.slice(x, axis=0, start=1)), lambda p, x: p.slice(p.sigmoid(x), axis=0, start=1)),
    Case("add through concat", {"a": MN, "b": ("K", "N"), "c": MN, "d": ("K", "N")},
         lambda p, a, b, c, d: p.add(p.concat(a, b, axis=0), p.concat(c, d, axis=0)),
         lambda p, a, b, c, d: p.concat(p.add(a, c), p.add(b, d), axis=0)),
    Case("gelu through concat", {"a": MN, "b": MN},
         lambda p, a, b: p.gelu(p.concat(a, b, axis=1)), lambda p, a, b: p.concat(p.gelu(a), p.gelu(b), axis=1)),
    Case("max through a positive scalar", {"x": MN, "c": ()},
         lambda p, x, c: p.max(p.mul(x, c), axes=(1,)), lambda p, x, c: p.mul(p.max(x, axes=(1,)), c), POS_C),
    Case("min through a positive scalar", {"x": MN, "c": ()},
         lambda p, x, c: p.min(p.mul(c, x), axes=(0,)), lambda p, x, c: p.mul(c, p.min(x, axes=(0,))), POS_C),
    Case("batchnorm folded into a matmul",
         {"x": MK, "W": KN, "mean": ("N",), "var": ("N",), "g": ("N",), "beta": ("N",)},
         lambda p, x, W, mean, var, g, beta: p.batchnorm(p.matmul(x, W), mean, var, g, beta, axis=1, eps=1e-5),
         _folded_batchnorm),
]

UNSOUND = [
    Case("matmul commutativity", {"A": NN, "B": NN}, lambda p, A, B: p.matmul(A, B), lambda p, A, B: p.matmul(B, A)),
    Case("sum through max", {"x": MN}, lambda p, x: p.sum(p.max(x, axes=(1,))), lambda p, x: p.max(p.sum(x, axes=(0,)))),
    Case("max of a sum", {"a": MN, "b": MN},
         lambda p, a, b: p.max(p.add(a, b), axes=(1,)), lambda p, a, b: p.add(p.max(a, axes=(1,)), p.max(b, axes=(1,)))),
    Case("wrong transpose inverse", {"x": ("N", "N", "N")},
         lambda p, x: p.transpose(p.transpose(x, perm=(1, 2, 0)), perm=(1, 2, 0)), lambda p, x: x),
    Case("wrong transpose axes", {"x": ("M", "N", "N")},
         lambda p, x: p.transpose(x, perm=(0, 2, 1)), lambda p, x: p.transpose(x, perm=(1, 0, 2))),
    Case("dropped scalar", {"A": MK, "B": KN}, lambda p, A, B: p.matmul(p.mul(A, p.c(2.0)), B),
         lambda p, A, B: p.matmul(A, B)),
    Case("exp(a+b) = exp a + exp b", {"a": MN, "b": MN},
         lambda p, a, b: p.exp(p.add(a, b)), lambda p, a, b: p.add(p.exp(a), p.exp(b))),
    Case("mean = sum", {"x": MN}, lambda p, x: p.mean(x, axes=(1,)), lambda p, x: p.sum(x, axes=(1,))),
    Case("softmax without its denominator", {"x": MN},
         lambda p, x: p.softmax(x, axis=1), lambda p, x: p.exp(p.sub(x, p.max(x, axes=(1,), keepdims=True)))),
    Case("rsqrt of a product", {"a": MN, "b": MN},
         lambda p, a, b: p.rsqrt(p.mul(a, b)), lambda p, a, b: p.add(p.rsqrt(a), p.rsqrt(b))),
    Case("relu is additive", {"a": MN, "b": MN},
         lambda p, a, b: p.relu(p.add(a, b)), lambda p, a, b: p.add(p.relu(a), p.relu(b))),
    Case("cumsum reversed", {"x": MN}, lambda p, x: p.cumsum(x, axis=1),
         lambda p, x: p.add(p.sub(p.sum(x, axes=(1,), keepdims=True), p.cumsum(x, axis=1)), x)),
    Case("sum of a cumsum is the sum", {"x": ("N",)}, lambda p, x: p.sum(p.cumsum(x, axis=0)), lambda p, x: p.sum(x)),
    Case("concat order swapped", {"a": MN, "b": MN},
         lambda p, a, b: p.concat(a, b, axis=0), lambda p, a, b: p.concat(b, a, axis=0)),
    Case("slice off by one", {"x": MN},
         lambda p, x: p.slice(x, axis=0, start=1), lambda p, x: p.slice(x, axis=0, start=0, stop=D.add(M, -1))),
    Case("max through a negative scalar", {"x": MN, "c": ()},
         lambda p, x, c: p.max(p.mul(x, c), axes=(1,)), lambda p, x, c: p.mul(p.max(x, axes=(1,)), c), NEG_C),
    Case("log of a sum", {"a": MN, "b": MN},
         lambda p, a, b: p.log(p.add(a, b)), lambda p, a, b: p.add(p.log(a), p.log(b))),
    Case("square of a sum", {"a": MN, "b": MN},
         lambda p, a, b: p.square(p.add(a, b)), lambda p, a, b: p.add(p.square(a), p.square(b))),
    Case("sigmoid is even", {"x": MN}, lambda p, x: p.sigmoid(p.neg(x)), lambda p, x: p.sigmoid(x)),
    Case("transpose of matmul, factors not swapped", {"A": NN, "B": NN},
         lambda p, A, B: p.transpose(p.matmul(A, B), perm=(1, 0)),
         lambda p, A, B: p.matmul(p.transpose(A, perm=(1, 0)), p.transpose(B, perm=(1, 0)))),
    Case("sum over the wrong axis", {"x": NN}, lambda p, x: p.sum(x, axes=(0,)), lambda p, x: p.sum(x, axes=(1,))),
    Case("row broadcast for a column", {"x": NN, "v": ("N",)},
         lambda p, x, v: p.add(x, v), lambda p, x, v: p.add(x, p.reshape(v, shape=("N", 1)))),
    Case("gelu = silu", {"x": MN}, lambda p, x: p.gelu(x), lambda p, x: p.silu(x)),
    Case("sum of a product", {"a": MN, "b": MN},
         lambda p, a, b: p.sum(p.mul(a, b), axes=(1,)), lambda p, a, b: p.mul(p.sum(a, axes=(1,)), p.sum(b, axes=(1,)))),
    Case("mean of a concat", {"a": MN, "b": ("K", "N")},
         lambda p, a, b: p.mean(p.concat(a, b, axis=0), axes=(0,)),
         lambda p, a, b: p.mul(p.add(p.mean(a, axes=(0,)), p.mean(b, axes=(0,))), p.c(0.5))),
    Case("reshape ignores a transpose", {"x": MN},
         lambda p, x: p.reshape(p.transpose(x, perm=(1, 0)), shape=(D.mul(M, N),)),
         lambda p, x: p.reshape(x, shape=(D.mul(M, N),))),
    Case("causal mask diagonal off by one", {"x": NN},
         lambda p, x: p.causal_mask(x, diagonal=0, fill=-1.0), lambda p, x: p.causal_mask(x, diagonal=1, fill=-1.0)),
    Case("abs of a difference", {"a": MN, "b": MN},
         lambda p, a, b: p.abs(p.sub(a, b)), lambda p, a, b: p.sub(p.abs(a), p.abs(b))),
    Case("layernorm = rmsnorm", {"x": MN}, lambda p, x: p.layernorm(x, eps=1e-5), lambda p, x: p.rmsnorm(x, eps=1e-5)),
    # the symbolic path once proved these two (found by the tests in this file):
    Case("pooling over a slice", {"x": (1, 1, "N")},  # library atoms did not carry their input shapes
         lambda p, x: p.avg_pool1d(p.slice(x, axis=2, start=0, stop=D.add(N, -1)), kernel_size=3, stride=1, padding=1),
         lambda p, x: p.slice(p.avg_pool1d(x, kernel_size=3, stride=1, padding=1), axis=2, start=0, stop=D.add(N, -1))),
    Case("max of a product of sums", {"x": ("K",), "y": ("M", "K")},  # exp(x_k) was pulled out of SUM_k
         lambda p, x, y: p.max(p.mul(p.sum(p.exp(x)), p.sum(y, axes=(1,))), axes=(0,)),
         lambda p, x, y: p.max(p.sum(p.broadcast_to(p.expand_dims(p.sum(p.mul(y, p.exp(x)), axes=(1,)), axis=0),
                                                    shape=("K", "M")), axes=(0,)), axes=(0,))),
]


def test_enough_planted_unsound_candidates() -> None:
    assert len(UNSOUND) >= 20
    assert len({c.name for c in UNSOUND + IDENTITIES}) == len(UNSOUND) + len(IDENTITIES)


@pytest.mark.parametrize("case", IDENTITIES, ids=lambda c: c.name)
def test_prove_true_identity(case: Case) -> None:
    lhs, rhs = case.programs()
    result = prove_equal(lhs, rhs, symbols=case.symbols)
    assert result.status == "proven", f"{case.name}: {result.status} by {result.method}: {result.detail}"


def replay_mismatch(lhs: Program, rhs: Program, result: ProofResult, symbols: tuple[ScalarSymbol, ...] = ()) -> str:
    """Why the counterexample is genuine, from the reference interpreter alone ("" if it is not)."""
    cex = result.counterexample
    assert cex is not None
    left, right = lhs.bind(cex.dims), rhs.bind(cex.dims)
    inputs = trial_inputs(left, lhs, rhs, symbols, cex.seed, cex.inputs)
    for sym in symbols:  # the symbols' samples respect their constraints
        assert {">0": inputs[sym.name] > 0, "<0": inputs[sym.name] < 0}.get(sym.constraint, True)
    with np.errstate(all="ignore"):
        a, b = interpret(left, inputs), interpret(right, inputs)
    for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
        if x.shape != y.shape:
            return f"shapes {x.shape} vs {y.shape}"
        if not np.array_equal(np.isfinite(x), np.isfinite(y)):
            return "finite on one side only"
        ok = np.isfinite(x)
        if not np.allclose(x[ok], y[ok], rtol=1e-6, atol=1e-8):
            return f"max |lhs - rhs| = {np.max(np.abs(x[ok] - y[ok])):.3g}"
    return ""


@pytest.mark.parametrize("case", UNSOUND, ids=lambda c: c.name)
def test_refute_unsound_candidate(case: Case) -> None:
    lhs, rhs = case.programs()
    result = prove_equal(lhs, rhs, symbols=case.symbols)
    assert result.status == "refuted", f"{case.name}: {result.status} by {result.method}: {result.detail}"
    assert replay_mismatch(lhs, rhs, result, case.symbols), (
        f"{case.name}: the counterexample {result.counterexample} does not replay")
    symbolic = prove_equal(lhs, rhs, symbols=case.symbols, numeric=False)
    assert symbolic.status != "proven", f"{case.name}: the symbolic path proves it ({symbolic.method})"


# -- soundness on random programs: a mutant that computes something else is never proved equal ---
SWAPS = (("exp", "tanh", "sigmoid", "neg", "relu", "abs", "square", "erf", "silu"),
         ("add", "sub", "mul", "maximum", "minimum"),
         ("sum", "mean", "max", "min", "logsumexp"))


def _unbound(program: Program) -> Program:
    return Program(program.nodes, program.outputs, (), program.name, program.roles)


def _mutant(program: Program, at: int, op: str) -> Program:
    """``program`` with node ``at`` computed by ``op`` (same operands and attributes)."""
    b = Builder("mutant")
    values: list[Value] = []
    for i, n in enumerate(program.nodes):
        args = [values[j] for j in n.inputs]
        if n.op == "input":
            values.append(b.input(n.attrs["name"], n.shape, n.dtype))
        else:
            values.append(b.emit(op if i == at else n.op, *args, **dict(n.attrs)))
    return b.build([values[o] for o in program.outputs])


@pytest.mark.slow  # seconds of interpreted kernels or compiles: make test-slow (CI) runs it
@settings(max_examples=2 * settings.default.max_examples)
@given(program=programs(bound=True, symbolic=True, allow_library=True, max_nodes=5), data=st.data())
def test_symbolic_path_never_proves_a_mutant(program: Program, data: st.DataObject) -> None:
    """One op of a random program swapped for another of its family; where the reference tells them
    apart on finite values, the normal forms, Z3 and induction (no NumPy search) must not prove them
    equal. (Differences only in inf/NaN, i.e. in definedness, are ``test_domains.py``'s.)"""
    program = program.expand()
    assume(reduction_depth(program) <= MAX_DEPTH)
    sites = [(i, family) for i, n in enumerate(program.nodes) for family in SWAPS if n.op in family]
    assume(sites)
    at, family = data.draw(st.sampled_from(sites))
    mutant = _mutant(program, at, data.draw(st.sampled_from([op for op in family if op != program.nodes[at].op])))
    inputs = make_inputs(program, 0)
    with np.errstate(all="ignore"):
        a, b = interpret(program, inputs), interpret(mutant.bind(program.bindings), inputs)
    pairs = list(zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)))
    assume(all(np.all(np.isfinite(x)) and np.all(np.isfinite(y)) for x, y in pairs))
    assume(any(not np.allclose(x, y, rtol=1e-6, atol=1e-8) for x, y in pairs))
    result = prove_equal(_unbound(program), mutant, numeric=False, timeout_ms=500)
    assert result.status != "proven", f"proved {program}\nequal to\n{mutant}\n({result.method})"
