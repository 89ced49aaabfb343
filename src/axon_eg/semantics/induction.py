"""Induction on a reduction length, for differences the normal form and Z3 alone cannot close.

For a dim ``n`` that bounds sums in the difference ``D`` of two normal forms, let ``P(m)`` be ``D``
with those sums running to ``m`` instead (every other use of ``n`` stays). ``P(0)`` drops them;
the step assumes ``P(m) = 0`` and proves ``P(m + 1) = 0`` after unfolding each such sum once
(``SUM_{k<m+1} f = SUM_{k<m} f + f(m)``, for every subset of the binders that run to ``m``).
Both queries are purified the same way, so the sums of the hypothesis and the goal coincide.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import z3

from axon_eg.ir.program import Program

from . import nf
from .nf import Ix, Mono, Poly
from .z3conv import Z3Context

STEP = "ind_m"


def _with_length(p: Poly, old: Ix, new: Ix) -> Poly:
    return Poly._build(Mono(m.coeff, tuple((v, new if n == old else n) for v, n in m.binders), m.factors)
                       for m in p.monos)


def _unfold(p: Poly, m: Ix) -> Poly:
    """Replace each sum to m + 1 by (sum to m) + (the term at m), for every binder running to m + 1."""
    top = m + 1
    out = []
    for mono in p.monos:
        mine = [b for b in mono.binders if b[1] == top]
        rest = [b for b in mono.binders if b[1] != top]
        for choice in itertools.product((False, True), repeat=len(mine)):
            binders = list(rest)
            mapping = {}
            for (v, _), at_m in zip(mine, choice):
                if at_m:
                    mapping[v] = m
                else:
                    binders.append((v, m))
            factors = tuple(sorted((nf._subst_atom(f, mapping) for f in mono.factors), key=repr))
            out.append(Mono(mono.coeff, tuple(binders), factors))
    return Poly._build(out)


def _candidates(diff: Poly) -> list[Ix]:
    seen = []
    for m in diff.monos:
        for _, n in m.binders:
            if n.const == 0 and len(n.terms) == 1 and n.terms[0][1] == 1 and isinstance(n.terms[0][0], str):
                if n not in seen:
                    seen.append(n)
    return seen


def prove_by_induction(diffs: Sequence[tuple[Poly, tuple[Ix, ...], int]], program: Program, symbols: Sequence,
                       timeout_ms: int, conditions: Sequence[Sequence[nf.Atom]] = ()) -> tuple[str, ...] | None:
    """The lemmas used when every difference is zero by induction on some length, else None.
    ``conditions``: per difference, binder-free domain conditions (``nf`` "dom" atoms) under which it
    must vanish, facts of both queries (they do not mention the induction variable, so the induction
    stays valid under them)."""
    from .prover import _constraint, _ranges  # lazy: induction and the prover call each other

    used: set[str] = set()
    for k, (diff, idx, node) in enumerate(diffs):
        if diff.is_zero:
            continue
        for n in _candidates(diff):
            m = Ix.of(STEP)
            general = _with_length(diff, n, m)
            base = _with_length(diff, n, Ix(0))
            step = _unfold(_with_length(diff, n, m + 1), m)
            ctx = Z3Context()
            facts = _ranges(ctx, program, idx, node) + [ctx.int_sym(STEP) >= 0]
            for s in symbols:
                facts += _constraint(ctx, s)
            facts += [f for f in (ctx.condition(c) for c in (conditions[k] if conditions else ())) if f is not None]
            if not _valid(ctx, facts, ctx.poly(base) == 0, timeout_ms):
                continue
            hypothesis = ctx.poly(general) == 0
            if _valid(ctx, facts + [hypothesis], ctx.poly(step) == 0, timeout_ms):
                used |= ctx.lemmas | {"induction"}
                break
        else:
            return None
    return tuple(sorted(used))


def _valid(ctx: Z3Context, facts: list, goal: z3.BoolRef, timeout_ms: int) -> bool:
    s = z3.Solver()
    s.set("timeout", timeout_ms)
    s.add(*facts, *ctx.axioms, z3.Not(goal))
    return s.check() == z3.unsat
