"""The lemma library: facts about finite sums, each proved once by induction on the sum's length.

A sum is ``Sum(n, f)`` with ``Sum`` uninterpreted and ``f`` an array built with ``Lambda``; its
definition enters only as ground unfolding facts for the sums a query contains
(``Sum(0, f) = 0``, ``Sum(n + 1, f) = Sum(n, f) + f[n]``, with ``f[n]`` beta-reduced structurally).
Each lemma is two quantifier-free queries, the base case and the step case, proved in Python order
so that a later lemma may instantiate an earlier one. The normal form (``nf``) applies these lemmas
as rewriting steps; proof records name the lemmas a proof used.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import z3

R = z3.RealSort()
I = z3.IntSort()  # noqa: E741 - the integer sort, as in the literature
ARR = z3.ArraySort(I, R)
SUM = z3.Function("Sum", I, ARR, R)


def at(f: z3.ExprRef, k: z3.ArithRef) -> z3.ArithRef:
    """``f[k]`` with ``f = Lambda(x, body)`` beta-reduced structurally (Z3 leaves Select(Lambda) alone)."""
    if z3.is_quantifier(f) and f.is_lambda():
        return z3.substitute_vars(f.body(), k)
    return z3.Select(f, k)


def unfold(n: z3.ArithRef, f: z3.ExprRef) -> list[z3.BoolRef]:
    """The definition of Sum at n + 1 and at 0, as ground facts."""
    return [SUM(n + 1, f) == SUM(n, f) + at(f, n), SUM(0, f) == 0]


def _valid(facts: list[z3.BoolRef], goal: z3.BoolRef, timeout_ms: int = 5000) -> bool:
    s = z3.Solver()
    s.set("timeout", timeout_ms)
    s.add(*facts, z3.Not(goal))
    return s.check() == z3.unsat


def lam(body: Callable[[z3.ArithRef], z3.ArithRef], name: str = "x") -> z3.ExprRef:
    x = z3.Int(name)
    return z3.Lambda([x], body(x))


@dataclass(frozen=True)
class Lemma:
    name: str
    statement: str
    seconds: float


def _induction(name: str, statement: str, p: Callable[[z3.ArithRef], z3.BoolRef],
               facts: Callable[[z3.ArithRef], list[z3.BoolRef]]) -> Lemma:
    """Prove P(0) and P(n) -> P(n+1) for n >= 0; ``facts(n)`` gives the ground instances used."""
    start = time.perf_counter()
    n = z3.Int("n")
    if not _valid(facts(n) + facts(z3.IntVal(0)), p(z3.IntVal(0))):
        raise AssertionError(f"lemma {name}: base case failed")
    if not _valid([n >= 0, p(n)] + facts(n), p(n + 1)):
        raise AssertionError(f"lemma {name}: step case failed")
    return Lemma(name, statement, time.perf_counter() - start)


@cache
def library() -> tuple[Lemma, ...]:
    """Prove every lemma (once per process; milliseconds each)."""
    F = z3.Function("F", I, R)
    G = z3.Function("G", I, R)
    H = z3.Function("H", I, I, R)
    c, j, a, m = z3.Real("c"), z3.Int("j"), z3.Int("a"), z3.Int("m")
    f, g = lam(F), lam(G)
    lemmas = []

    # linearity: SUM c*f = c * SUM f
    cf = lam(lambda x: c * F(x))
    lemmas.append(_induction("sum_linearity", "Sum(n, c*f) = c*Sum(n, f)",
                             lambda n: SUM(n, cf) == c * SUM(n, f), lambda n: unfold(n, cf) + unfold(n, f)))
    # additivity: SUM (f + g) = SUM f + SUM g
    fg = lam(lambda x: F(x) + G(x))
    lemmas.append(_induction("sum_additivity", "Sum(n, f+g) = Sum(n, f) + Sum(n, g)",
                             lambda n: SUM(n, fg) == SUM(n, f) + SUM(n, g),
                             lambda n: unfold(n, fg) + unfold(n, f) + unfold(n, g)))
    # sum of a constant
    const = lam(lambda x: c)
    lemmas.append(_induction("sum_constant", "Sum(n, c) = n*c",
                             lambda n: SUM(n, const) == z3.ToReal(n) * c, lambda n: unfold(n, const)))

    # swap (Fubini): SUM_i<n SUM_j<m H(i,j) = SUM_j<m SUM_i<n H(i,j); induction on n, with the column
    # sums unfolded pointwise (one quantified fact, instantiated by E-matching) and additivity instantiated
    lemmas.append(_swap(H, m))

    # range split: SUM_{k<a+n} f = SUM_{k<a} f + SUM_{k<n} f(a+k); induction on n
    shifted = lam(lambda x: F(a + x))
    lemmas.append(_induction("sum_range_split", "Sum(a+n, f) = Sum(a, f) + Sum(n, k -> f(a+k))",
                             lambda n: SUM(a + n, f) == SUM(a, f) + SUM(n, shifted),
                             lambda n: [SUM(a + n + 1, f) == SUM(a + n, f) + F(a + n)] + unfold(n, shifted)))
    # delta: SUM_{k<n} [k == j] f(k) = [j < n] f(j)  for j >= 0
    delta = lam(lambda x: z3.If(x == j, F(x), z3.RealVal(0)))
    lemmas.append(_induction("sum_delta", "Sum(n, k -> [k=j] f(k)) = [0<=j<n] f(j)",
                             lambda n: z3.Implies(j >= 0, SUM(n, delta) == z3.If(j < n, F(j), z3.RealVal(0))),
                             lambda n: unfold(n, delta)))
    # positivity: all terms positive -> SUM over a non-empty range is positive (exp terms, softmax denominators)
    pos = lam(lambda x: z3.Function("E", I, R)(x))
    E = z3.Function("E", I, R)
    lemmas.append(_induction("sum_positive", "(forall k. f(k) > 0) -> Sum(n+1, f) > 0",
                             lambda n: SUM(n + 1, pos) > 0,
                             lambda n: unfold(n, pos) + unfold(n + 1, pos) + [E(n) > 0, E(n + 1) > 0, E(0) > 0]))
    # reindex (reversal) is range split + delta in the cases tiling needs; exp facts are ground axioms
    del g
    return tuple(lemmas)


def _swap(H: z3.FuncDeclRef, m: z3.ArithRef) -> Lemma:
    """Fubini by induction on n. Arrays are named by constants and related by facts proved at a fresh
    index (extensionality applied in Python): Z3 itself does not reason well about lambda equality."""
    start = time.perf_counter()
    y0 = z3.Int("y0")
    n = z3.Int("n")
    zero = z3.IntVal(0)

    def inner(k: z3.ArithRef, j: z3.ArithRef) -> z3.ArithRef:  # SUM_i<k H(i, j)
        return SUM(k, lam(lambda x: H(x, j)))

    # column sums col(k) = j -> inner(k, j), rows row(i) = j -> H(i, j), as array constants
    col0, coln, coln1 = (z3.Const(name, ARR) for name in ("col0", "coln", "coln1"))
    rown, both, zeros = (z3.Const(name, ARR) for name in ("rown", "both", "zeros"))
    outer = z3.Const("outer", ARR)  # i -> SUM(m, row(i))
    pointwise = [  # each proved below at the fresh index y0, then used as an array equality
        (z3.Select(col0, y0) == inner(zero, y0), z3.Select(zeros, y0) == 0, z3.Select(col0, y0) == z3.Select(zeros, y0),
         unfold(zero, lam(lambda x: H(x, y0)))),
        (z3.Select(coln1, y0) == inner(n + 1, y0), z3.Select(both, y0) == inner(n, y0) + H(n, y0),
         z3.Select(coln1, y0) == z3.Select(both, y0), unfold(n, lam(lambda x: H(x, y0)))),
    ]
    for defines_left, defines_right, goal, facts in pointwise:
        if not _valid([defines_left, defines_right, *facts], goal):
            raise AssertionError("lemma sum_swap: a column identity failed")
    # base: SUM(0, outer) = 0 = SUM(m, zeros) = SUM(m, col0)
    base = [SUM(zero, outer) == 0, col0 == zeros, SUM(m, zeros) == z3.ToReal(m) * 0]  # sum_constant
    if not _valid(base, SUM(zero, outer) == SUM(m, col0)):
        raise AssertionError("lemma sum_swap: base case failed")
    # step: hypothesis, outer unfolding, coln1 = both (above), additivity for both = coln + rown
    step = [n >= 0, SUM(n, outer) == SUM(m, coln),
            SUM(n + 1, outer) == SUM(n, outer) + SUM(m, rown),
            coln1 == both,
            SUM(m, both) == SUM(m, coln) + SUM(m, rown)]
    if not _valid(step, SUM(n + 1, outer) == SUM(m, coln1)):
        raise AssertionError("lemma sum_swap: step case failed")
    return Lemma("sum_swap", "Sum(n, i -> Sum(m, j -> H(i,j))) = Sum(m, j -> Sum(n, i -> H(i,j)))",
                 time.perf_counter() - start)
