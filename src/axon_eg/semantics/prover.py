"""Prove two programs equal for every shape, or refute them with a replayed counterexample.

``prove_equal(lhs, rhs)`` takes two Programs over the same inputs with *symbolic* dims:

1. shapes and dtypes: the registry's shape rules must give the same symbolic output shape;
2. a NumPy search at small random sizes: a mismatch in the float64 reference is a genuine
   counterexample (dims, seed and error are returned), so the candidate is refuted;
3. normal forms (``nf``) of both sides at a symbolic output index, using the lemma library;
   equal normal forms prove the candidate;
4. otherwise the difference goes to Z3, purified (sums and max/min reductions are fresh variables)
   with ground axiom instances, dims >= 1 and indices in range: ``unsat`` proves it;
5. otherwise induction on a reduction length (base and step as two queries, ``induction``).

Anything else is ``unknown`` and is never admitted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import z3

from axon_eg.errors import AxonError
from axon_eg.ir import dims as D
from axon_eg.ir.inputs import random_inputs
from axon_eg.ir.interpret import interpret
from axon_eg.ir.program import Program

from . import nf
from .ops import Evaluator, NoSemantics, dim_to_ix
from .z3conv import Z3Context

SOLVER = f"z3 {z3.get_version_string()}"


@dataclass(frozen=True)
class Counterexample:
    dims: dict[str, int]
    seed: int
    max_error: float
    detail: str = ""

    def __str__(self) -> str:
        dims = ", ".join(f"{k}={v}" for k, v in sorted(self.dims.items())) or "no dims"
        return f"{dims}, seed {self.seed}: {self.detail or f'max |lhs - rhs| = {self.max_error:.3g}'}"


@dataclass(frozen=True)
class ProofResult:
    status: str  # "proven" | "refuted" | "unknown"
    method: str
    seconds: float
    detail: str = ""
    counterexample: Counterexample | None = None
    lemmas: tuple[str, ...] = ()

    @property
    def proven(self) -> bool:
        return self.status == "proven"


@dataclass(frozen=True)
class ScalarSymbol:
    """A rank-0 *input* named ``name`` that stands for any real scalar, optionally constrained (a rule
    over it matches any constant). Symbols are inputs, never constant values, so a literal that
    happens to equal a symbol's sample value is never taken for the symbol."""

    name: str
    constraint: str | None = None  # ">0", "<0", ">=0"


@dataclass
class _Query:
    ctx: Z3Context = field(default_factory=Z3Context)
    facts: list[z3.BoolRef] = field(default_factory=list)


def _sample_dims(names: Sequence[str], rng: np.random.Generator, low: int, high: int) -> dict[str, int]:
    return {n: int(rng.integers(low, high + 1)) for n in names}


def numeric_search(lhs: Program, rhs: Program, symbols: Sequence[ScalarSymbol] = (), trials: int = 6,
                   seed: int = 0, rtol: float = 1e-6, atol: float = 1e-8) -> Counterexample | None:
    """Evaluate both sides in float64 at small random sizes; return the first mismatch."""
    rng = np.random.default_rng(seed)
    names = sorted(lhs.free_dims | rhs.free_dims)
    for t in range(trials):
        low, high = (1, 3) if t % 2 == 0 else (2, 5)
        dims = _sample_dims(names, rng, low, high)
        try:
            left, right = lhs.bind(dims), rhs.bind(dims)
        except AxonError:
            continue  # these sizes do not fit the pattern's shape constraints (e.g. an odd rope dim)
        inputs = signed_symbols(random_inputs(left, seed=seed * 100 + t), symbols)
        a, b = interpret(left, inputs), interpret(right, inputs)
        a, b = (a if isinstance(a, tuple) else (a,)), (b if isinstance(b, tuple) else (b,))
        for x, y in zip(a, b):
            if x.shape != y.shape:
                return Counterexample(dims, seed * 100 + t, float("inf"), f"shapes {x.shape} vs {y.shape}")
            finite = np.isfinite(x) & np.isfinite(y)
            if not np.array_equal(np.isfinite(x), np.isfinite(y)):
                return Counterexample(dims, seed * 100 + t, float("inf"), "one side is not finite where the other is")
            if finite.any() and not np.allclose(x[finite], y[finite], rtol=rtol, atol=atol):
                return Counterexample(dims, seed * 100 + t, float(np.max(np.abs(x[finite] - y[finite]))))
    return None


def signed_symbols(inputs: dict[str, np.ndarray], symbols: Sequence[ScalarSymbol]) -> dict[str, np.ndarray]:
    """The inputs with each constrained symbol's sample given the symbol's sign."""
    out = dict(inputs)
    for s in symbols:
        if s.name in out and s.constraint in (">0", ">=0"):
            out[s.name] = np.abs(out[s.name])
        elif s.name in out and s.constraint == "<0":
            out[s.name] = -np.abs(out[s.name])
    return out


def _ranges(ctx: Z3Context, program: Program, idx: Sequence[nf.Ix], node: int) -> list[z3.BoolRef]:
    facts = []
    for d in program.free_dims:
        facts.append(ctx.int_sym(d) >= 1)
    for ix, dim in zip(idx, program.nodes[node].shape):
        facts += [ctx.ix(ix) >= 0, ctx.ix(ix) < ctx.ix(dim_to_ix(dim))]
    return facts


def _constraint(ctx: Z3Context, sym: ScalarSymbol) -> list[z3.BoolRef]:
    v = ctx.real(f"sym_{sym.name}")
    return {None: [], ">0": [v > 0], "<0": [v < 0], ">=0": [v >= 0]}[sym.constraint]


def prove_equal(lhs: Program, rhs: Program, *, symbols: Sequence[ScalarSymbol] = (), timeout_ms: int = 2000,
                numeric: bool = True) -> ProofResult:
    start = time.perf_counter()

    def done(status: str, method: str, detail: str = "", cex: Counterexample | None = None,
             lemmas: Sequence[str] = ()) -> ProofResult:
        return ProofResult(status, method, time.perf_counter() - start, detail, cex, tuple(sorted(set(lemmas))))

    if len(lhs.outputs) != len(rhs.outputs):
        return done("refuted", "shape", "different numbers of outputs")
    for a, b in zip(lhs.outputs, rhs.outputs):
        na, nb = lhs.nodes[a], rhs.nodes[b]
        if na.shape != nb.shape or na.dtype != nb.dtype:
            dims = {n: 2 + i for i, n in enumerate(sorted(lhs.free_dims | rhs.free_dims))}
            return done("refuted", "shape", f"{na.dtype}{D.format_shape(na.shape)} vs {nb.dtype}{D.format_shape(nb.shape)}",
                        Counterexample(dims, 0, float("inf"), "output shapes or dtypes differ"))
    if numeric:
        cex = numeric_search(lhs, rhs, symbols)
        if cex is not None:
            return done("refuted", "numpy search", str(cex), cex)
    names = [s.name for s in symbols]
    positive = [s.name for s in symbols if s.constraint == ">0"]
    negative = [s.name for s in symbols if s.constraint == "<0"]
    sums_lemmas: tuple[str, ...] = ()
    try:
        diffs = []
        for k in range(len(lhs.outputs)):
            left, idx = Evaluator(lhs, names, positive, negative).output(k, prefix=f"o{k}_")
            right, _ = Evaluator(rhs, names, positive, negative).output(k, prefix=f"o{k}_")
            diffs.append((left - right, idx, lhs.outputs[k]))
            if any(m.binders for side in (left, right) for m in side.monos):
                sums_lemmas = ("sum_additivity", "sum_linearity", "sum_swap")
    except NoSemantics as e:
        return done("unknown", "semantics", str(e))
    if all(d.is_zero for d, _, _ in diffs):
        return done("proven", "normal form", lemmas=sums_lemmas)
    q = _Query()
    goals = []
    for diff, idx, node in diffs:
        if diff.is_zero:
            continue
        goals.append(q.ctx.poly(diff) != 0)
        q.facts += _ranges(q.ctx, lhs, idx, node)
    for s in symbols:
        q.facts += _constraint(q.ctx, s)
    solver = z3.Solver()
    solver.set("timeout", timeout_ms)
    solver.add(*q.facts, *q.ctx.axioms, z3.Or(goals))
    result = solver.check()
    if result == z3.unsat:
        return done("proven", "normal form + z3", lemmas=q.ctx.lemmas)
    from .induction import prove_by_induction

    outcome = prove_by_induction(diffs, lhs, symbols, timeout_ms)
    if outcome is not None:
        return done("proven", "induction", lemmas=outcome)
    return done("unknown", "z3", f"z3 says {result} on the purified difference")


