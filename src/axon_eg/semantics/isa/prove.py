"""Prove an instruction sequence equal to a tile-level op, or two instruction sequences equal.

The steps of :func:`axon_eg.semantics.prover.prove_equal`, with instructions on one side (a lowering)
or both (a fusion):

1. well-formedness: the sequence runs (:class:`~.instructions.Machine`); shapes that disagree refute
   it with sizes where they do, a placement or attribute the hardware does not allow makes it
   ``illegal``;
2. normal forms of both sides at a symbolic output index: equal forms prove it;
3. a NumPy search at small random sizes (the tile op through the reference interpreter, the
   sequence through its normal form evaluated numerically): a mismatch is a counterexample;
4. Z3 on the purified difference, with dims >= 1, indices in range and every instruction limit as a
   side condition (``size <= limit``, the limit an integer >= 1, so a proof holds on every target);
5. induction on a reduction length (lowerings).

Results are ``prover.ProofResult``; status ``illegal`` is never admitted, like ``unknown``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence

import numpy as np
import z3

from axon_eg.errors import AxonError
from axon_eg.ir.inputs import random_inputs
from axon_eg.ir.interpret import interpret
from axon_eg.ir.program import Program

from .. import domains
from ..induction import prove_by_induction
from ..nf import Ix, Poly
from ..numeric import EvaluationError, PolyEvaluator
from ..op_semantics import Evaluator, NoSemantics, dim_to_ix
from ..prover import Counterexample, ProofResult, ScalarSymbol, _constraint, _Query, _ranges, domain_mismatch, signed_symbols
from ..z3conv import Z3Context
from .instructions import ANY_FUNCTION, IllFormed, Instr, Machine, TileType, distinguishing_dims


def any_function(v: float) -> float:
    """The numeric stand-in for an arbitrary function: neither linear, odd, even nor monotone."""
    return math.sin(3.0 * v) + 0.5 * v * v + 0.25


UF = {ANY_FUNCTION: any_function}


class _Clock:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    def done(self, status: str, method: str, detail: str = "", cex: Counterexample | None = None,
             lemmas: Sequence[str] = ()) -> ProofResult:
        return ProofResult(status, method, time.perf_counter() - self.start, detail, cex, tuple(sorted(set(lemmas))))


def _ill_formed(clock: _Clock, e: IllFormed) -> ProofResult:
    if e.illegal:
        return clock.done("illegal", "well-formedness", str(e))
    return clock.done("refuted", "shape", str(e), Counterexample(e.dims or {}, 0, float("inf"), str(e)))


def _limit_facts(ctx: Z3Context, machines: Sequence[Machine]) -> list[z3.BoolRef]:
    facts = []
    for m in machines:
        for expr, key in sorted(m.limits, key=repr):
            bound = ctx.int_sym(f"limit[{key}]")
            facts += [bound >= 1, ctx.ix(expr) <= bound]
    return facts


def _close(a: np.ndarray, b: np.ndarray, rtol: float = 1e-6, atol: float = 1e-8) -> tuple[bool, float, str]:
    if not np.array_equal(np.isfinite(a), np.isfinite(b)):
        return False, float("inf"), "one side is not finite where the other is"
    finite = np.isfinite(a)
    if finite.any() and not np.allclose(a[finite], b[finite], rtol=rtol, atol=atol):
        return False, float(np.max(np.abs(a[finite] - b[finite]))), ""
    return True, 0.0, ""


def _evaluate(poly: Poly, idx: Sequence[Ix], shape: tuple[int, ...], evaluator: PolyEvaluator) -> np.ndarray:
    out = np.empty(shape)
    names = [i.terms[0][0] for i in idx]
    for point in np.ndindex(*shape):
        out[point] = evaluator.evaluate(poly, dict(zip(names, point)))
    return out


def prove_lowering(program: Program, inputs: Mapping[str, TileType], sequence: Sequence[Instr], *,
                   symbols: Sequence[ScalarSymbol] = (), output: str = "out", output_space: str = "sbuf",
                   timeout_ms: int = 2000, trials: int = 4, seed: int = 0) -> tuple[ProofResult, Machine | None]:
    """Whether ``sequence`` leaves in tile ``output`` (in ``output_space``) what ``program`` (a tile
    op over symbolic dims whose inputs are the tiles ``inputs``) computes; the machine gives the
    sequence's conditions (limits, features, dtypes) when it ran."""
    clock = _Clock()
    machine = Machine(inputs, [s.name for s in symbols])
    known = (frozenset(("sym", s.name) for s in symbols if s.constraint == ">0"),
             frozenset(("sym", s.name) for s in symbols if s.constraint == "<0"), frozenset(program.free_dims))
    machine_domain = domains.Domain(*known)  # what the sequence's instructions require (immediates, activations)
    try:
        with domains.domain_scope(*known) as during_run:
            machine.run(sequence)
        machine_domain.conditions |= during_run.conditions
        if output not in machine.types:
            raise IllFormed(f"the sequence never writes {output!r}", illegal=True)
    except IllFormed as e:
        return _ill_formed(clock, e), None
    node = program.outputs[0]
    want = tuple(dim_to_ix(d) for d in program.nodes[node].shape)
    got = machine.types[output]
    if got.space != output_space:
        return clock.done("illegal", "well-formedness", f"{output!r} ends in {got.space}, not {output_space}"), machine
    if len(got.shape) != len(want):
        return clock.done("refuted", "shape", f"rank {len(got.shape)} vs {len(want)}",
                          Counterexample({}, 0, float("inf"), "ranks differ")), machine
    for a, b in zip(got.shape, want):
        if a != b:
            dims = distinguishing_dims(a, b) or {}
            return clock.done("refuted", "shape", f"{a!r} vs {b!r}",
                              Counterexample(dims, 0, float("inf"), f"output shape: {a!r} vs {b!r}")), machine
    names = [s.name for s in symbols]
    positive = [s.name for s in symbols if s.constraint == ">0"]
    negative = [s.name for s in symbols if s.constraint == "<0"]
    try:
        evaluator = Evaluator(program, names, positive, negative)
        left, idx = evaluator.output(0, prefix="o0_")
        with domains.domain_scope(*known) as reading:
            right = machine.value(output, idx)
        machine_domain.conditions |= reading.conditions
    except (NoSemantics, IllFormed) as e:
        return clock.done("unknown", "semantics", str(e)), machine
    query = _Query()  # the op and the sequence must be defined at the same inputs (log, sqrt, recip, ...)
    query.facts += _ranges(query.ctx, program, idx, node) + [f for s in symbols for f in _constraint(query.ctx, s)]
    why = domain_mismatch(query, evaluator.domain(0, prefix="o0_"),
                          domains.normalize_conditions(frozenset(machine_domain.conditions)), timeout_ms)
    diff = left - right
    if diff.is_zero and not why:
        lemmas = ("sum_additivity", "sum_linearity", "sum_swap") if any(m.binders for m in left.monos) else ()
        return clock.done("proven", "normal form", lemmas=lemmas), machine
    cex = _search_lowering(program, right, idx, symbols, trials, seed)
    if cex is not None:
        return clock.done("refuted", "numpy search", str(cex), cex), machine
    if why:  # equal values where both are defined, but not defined at the same inputs: never admitted
        return clock.done("unknown", "domain", why), machine
    ctx = Z3Context()
    facts = _ranges(ctx, program, idx, node) + _limit_facts(ctx, [machine])
    for s in symbols:
        facts += _constraint(ctx, s)
    goal = ctx.poly(diff) != 0  # converting first: it fills ctx.axioms
    if _unsat(facts + ctx.axioms + [goal], timeout_ms):
        return clock.done("proven", "normal form + z3", lemmas=ctx.lemmas), machine
    lemmas = prove_by_induction([(diff, idx, node)], program, symbols, timeout_ms)
    if lemmas is not None:
        return clock.done("proven", "induction", lemmas=lemmas), machine
    return clock.done("unknown", "z3", "z3 does not close the purified difference"), machine


def _unsat(facts: list[z3.BoolRef], timeout_ms: int) -> bool:
    solver = z3.Solver()
    solver.set("timeout", timeout_ms)
    solver.add(*facts)
    return solver.check() == z3.unsat


def _search_lowering(program: Program, right: Poly, idx: Sequence[Ix], symbols: Sequence[ScalarSymbol],
                     trials: int, seed: int) -> Counterexample | None:
    rng = np.random.default_rng(seed)
    names = sorted(program.free_dims)
    for t in range(trials):
        low, high = (1, 3) if t % 2 == 0 else (2, 5)
        dims = {n: int(rng.integers(low, high + 1)) for n in names}
        try:
            bound = program.bind(dims)
        except AxonError:
            continue
        inputs = signed_symbols(random_inputs(bound, seed=seed * 100 + t), symbols)
        scalars = {s.name: float(inputs[s.name]) for s in symbols}
        reference = np.asarray(interpret(bound, inputs), dtype=np.float64)
        try:
            with np.errstate(all="ignore"):
                value = _evaluate(right, idx, reference.shape, PolyEvaluator(dims, inputs, UF, scalars))
        except (EvaluationError, ArithmeticError) as e:
            return Counterexample(dims, seed * 100 + t, float("inf"), f"the sequence cannot be evaluated: {e}")
        ok, err, detail = _close(reference, value)
        if not ok:
            return Counterexample(dims, seed * 100 + t, err, detail)
    return None


def prove_same(inputs: Mapping[str, TileType], left: Sequence[Instr], right: Sequence[Instr], outputs: Sequence[str],
               *, scalars: Mapping[str, float] | None = None, timeout_ms: int = 2000, trials: int = 4,
               seed: int = 0) -> ProofResult:
    """Whether two sequences over the same input tiles leave the same values in ``outputs`` (for a
    fusion: the pair of instructions and the fused one). Memories may differ; the caller records it."""
    clock = _Clock()
    scalars = dict(scalars or {})
    dim_names = frozenset(s for t in inputs.values() for d in t.shape for s in d.symbols())
    machines, required = [], []  # each side's domain conditions: what its instructions require
    for side in (left, right):
        m = Machine(inputs, scalars)
        try:
            with domains.domain_scope(dims=dim_names) as running:
                m.run(side)
            for name in outputs:
                if name not in m.types:
                    raise IllFormed(f"the sequence never writes {name!r}", illegal=True)
        except IllFormed as e:
            return _ill_formed(clock, e)
        machines.append(m)
        required.append(running.conditions)
    a, b = machines
    diffs = []
    for k, name in enumerate(outputs):
        sa, sb = a.types[name].shape, b.types[name].shape
        if sa != sb:
            dims = next((d for x, y in zip(sa, sb) if x != y and (d := distinguishing_dims(x, y))), {})
            return clock.done("refuted", "shape", f"{name}: {sa!r} vs {sb!r}", Counterexample(dims, 0, float("inf"), "shapes"))
        idx = tuple(Ix.of(f"o{k}_{i}") for i in range(len(sa)))
        values = []
        for m, dom in zip(machines, required):
            with domains.domain_scope(dims=dim_names) as reading:
                values.append(m.value(name, idx))
            dom |= reading.conditions
        diffs.append((name, values[0] - values[1], values[0], values[1], idx, sa))
    ctx = Z3Context()
    facts = _limit_facts(ctx, machines)
    for t in inputs.values():
        for d in t.shape:
            facts += [ctx.int_sym(s) >= 1 for s in sorted(d.symbols())]
    for _, _, _, _, idx, shape in diffs:
        facts += [x for i, d in zip(idx, shape) for x in (ctx.ix(i) >= 0, ctx.ix(i) < ctx.ix(d))]
    query = _Query(ctx, list(facts))
    why = domain_mismatch(query, *(domains.normalize_conditions(frozenset(d)) for d in required), timeout_ms)
    if all(d[1].is_zero for d in diffs) and not why:
        return clock.done("proven", "normal form")
    cex = _search_same(inputs, diffs, scalars, trials, seed)
    if cex is not None:
        return clock.done("refuted", "numpy search", str(cex), cex)
    if why:  # equal where both are defined, but not defined at the same inputs: never admitted
        return clock.done("unknown", "domain", why)
    goals = [ctx.poly(diff) != 0 for _, diff, _, _, _, _ in diffs if not diff.is_zero]
    if _unsat(facts + ctx.axioms + [z3.Or(goals)], timeout_ms):
        return clock.done("proven", "normal form + z3", lemmas=ctx.lemmas)
    return clock.done("unknown", "z3", "z3 does not close the purified difference")


def _search_same(inputs: Mapping[str, TileType], diffs: list, scalars: Mapping[str, float], trials: int,
                 seed: int) -> Counterexample | None:
    rng = np.random.default_rng(seed)
    names = sorted({s for t in inputs.values() for d in t.shape for s in d.symbols()})
    for t in range(trials):
        low, high = (1, 3) if t % 2 == 0 else (2, 5)
        dims = {n: int(rng.integers(low, high + 1)) for n in names}
        env = {n: Ix(v) for n, v in dims.items()}
        data_rng = np.random.default_rng(seed * 100 + t)
        arrays = {}
        for name, tile in inputs.items():
            shape = tuple(d.subst(env).const for d in tile.shape)
            x = data_rng.standard_normal(size=shape)
            arrays[name] = np.where(x == 0.0, 1.0, x)
        evaluator = PolyEvaluator(dims, arrays, UF, scalars)
        for name, _, lp, rp, idx, shape in diffs:
            concrete = tuple(d.subst(env).const for d in shape)
            with np.errstate(all="ignore"):
                ok, err, detail = _close(_evaluate(lp, idx, concrete, evaluator), _evaluate(rp, idx, concrete, evaluator))
            if not ok:
                return Counterexample(dims, seed * 100 + t, err, f"{name}: {detail or f'max |lhs - rhs| = {err:.3g}'}")
    return None
