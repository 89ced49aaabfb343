"""Prove two programs equal for every shape, or refute them with a replayed counterexample.

``prove_equal(lhs, rhs)`` takes two Programs over the same inputs with *symbolic* dims. Equal is the
float64 reference's notion (the NumPy search's): for all inputs and all sizes >= 1, at every output
index both sides are finite and agree, or neither is finite. The prover shows it in three parts: (a)
the left side is *defined* exactly where the right side is, (b) where defined, the values agree, and
(c) where undefined, neither side is finite. A side is defined at an index when every partial-function
application its value there depends on is inside its domain: log(p) needs p > 0, sqrt(p) p >= 0,
rsqrt(p) p > 0, reciprocal(p) and division by p need p != 0, pow(x, e) needs x >= 0 for a non-integer
e > 0, x > 0 for a non-integer e < 0 and x != 0 for a negative integer e (``ops``, ``domains.fn_domain``);
x ** 0 is 1 everywhere and needs nothing. An application under a reduction's or a matmul's bound index
is required for every value of it; one in a part of a concat (or the kept part of a causal mask) only
where that part is selected; one in a ``where``'s branch only where that branch is selected (``c != 0``,
``c == 0``), the condition's own everywhere: where(c, a, b) needs dom(c), c -> dom(a) and not c ->
dom(b). Every application in both branches of a *real* comparison (maximum, minimum, relu, clamp,
abs: they propagate NaN in torch and NumPy) is required. A mean's division by its count (>= 1) is no
condition. Inside its domain a side is a finite real (the normal form); for (c), ``nonfinite`` follows
IEEE arithmetic through each side (NaN > 0 is false, relu(-inf) = 0, 1/inf = 0, 1/-0.0 = -inf, ...): a
side that may be finite where its domain fails is ``unknown``, whatever its normal form.

1. shapes and dtypes: the registry's shape rules must give the same symbolic output shape;
2. a NumPy search at small random sizes (``numeric_search``): inputs inside the domains of *both*
   sides, then, where either side has a partial function, inputs of mixed sign and on the domain
   boundaries (0, -1, ...), then, where either side compares with a constant (a ``where`` guard, a
   clamp), inputs on and next to those constants (``guard_values``); a mismatch in the float64
   reference, or a side that is NaN / inf where the other is finite, is a genuine counterexample (dims,
   seed, inputs and error are returned);
3. normal forms (``nf``) of both sides at a symbolic output index, using the lemma library, with each
   side's domain conditions (canonical "dom" atoms). Equal condition sets satisfy (a); otherwise each
   condition one side has and the other lacks must follow from the other side's conditions (Z3,
   purified as in step 4, a bound index as a fresh constant in range); one that does not makes the
   result ``unknown`` (naming it). Then (c): unless the conditions hold everywhere, a side that may be
   finite outside them (``finite_outside``) makes it ``unknown`` (method "nan"). Equal normal forms then
   prove the candidate;
4. otherwise the difference goes to Z3, purified (sums and max/min reductions are fresh variables)
   with ground axiom instances (monotonicity of log and sqrt only inside their domains), dims >= 1,
   indices in range and the binder-free domain conditions as facts: ``unsat`` proves it;
5. otherwise induction on a reduction length (base and step as two queries, ``induction``).

Anything else is ``unknown`` and is never admitted. What (c) leaves out: NaN, +inf and -inf are all
"not finite" here, as in the search; a context that maps them to different finite values (relu(-inf) =
0, relu(NaN) = NaN) can tell apart two sides this proves equal, where that context is itself undefined.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import z3

from axon_eg.errors import AxonError
from axon_eg.ir import dims as D
from axon_eg.ir import ops as O
from axon_eg.ir.inputs import index_bounds, mixed_inputs, random_inputs
from axon_eg.ir.interpret import interpret
from axon_eg.ir.program import Program

from . import domains, nf, nonfinite
from .op_semantics import Evaluator, NoSemantics, attribute_dims, dim_to_ix
from .z3conv import Z3Context

SOLVER = f"z3 {z3.get_version_string()}"


@dataclass(frozen=True)
class Counterexample:
    dims: dict[str, int]
    seed: int
    max_error: float
    detail: str = ""
    inputs: str = "domain"  # how numeric_search drew them: "domain", "mixed" or "boundary" (trial_inputs)

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


ATTRIBUTE_SIZES = (1, 3)  # symbolic attributes (a conv's stride, padding + 1, dilation, groups) are drawn here
RETRIES = 24  # draws more per trial, from a generator of their own, while the sizes do not fit the sides


def _bind_trial(lhs: Program, rhs: Program, names: Sequence[str], rng: np.random.Generator, low: int, high: int,
                retry_seed: int) -> tuple[dict[str, int], Program, Program] | None:
    """Both sides bound to one draw of sizes (attribute dims from ``ATTRIBUTE_SIZES``); while a draw does not
    fit (a conv window larger than its padded input, channels that do not split into groups), more draws
    from ``retry_seed``'s generator, so the trial's own stream (and every other trial's) is unchanged."""
    attrs = attribute_dims(names)
    plain = [n for n in names if n not in attrs]
    dims = {**_sample_dims(plain, rng, low, high), **_sample_dims(sorted(attrs), rng, *ATTRIBUTE_SIZES)} \
        if attrs else _sample_dims(names, rng, low, high)
    retry = np.random.default_rng(retry_seed)
    for attempt in range(RETRIES + 1 if attrs else 1):
        if attempt:
            dims = {**_sample_dims(plain, retry, low, high), **_sample_dims(sorted(attrs), retry, *ATTRIBUTE_SIZES)}
        try:
            return dims, lhs.bind(dims), rhs.bind(dims)
        except AxonError:
            continue  # these sizes do not fit the pattern's shape constraints (e.g. an odd rope dim)
    return None


MIXED_TRIALS = ("mixed", "boundary", "mixed", "boundary")  # after the domain trials, where a side is partial
GUARD_TRIALS = ("guards", "guards")  # after those, where a side compares with a constant
THRESHOLDS = {"gt", "ge", "lt", "le", "eq", "ne", "maximum", "minimum"}  # ops whose constant operand is a threshold


def _partial(program: Program) -> bool:
    """Whether the program applies a partial function (composites may, through their expansion)."""
    for n in program.nodes:
        op = O.get(n.op)
        if O.is_partial(n.op) or op.kind == O.OpKind.COMPOSITE:
            return True
    return False


def guard_values(*programs: Program) -> list[float]:
    """The values a comparison, maximum or minimum compares with (its constant operand) or a clamp
    clamps to, and their neighbours on both sides: a ``where`` guarded by ``x < -4`` selects its first
    branch only there, which N(0, 1) inputs hardly reach."""
    found = set()
    for p in programs:
        for n in p.nodes:
            if n.op in THRESHOLDS:
                found |= {float(p.nodes[j].attrs["value"]) for j in n.inputs if p.nodes[j].op == "constant"}
            elif n.op == "clamp":
                found |= {float(n.attrs["lo"]), float(n.attrs["hi"])}
    found = {v for v in found if math.isfinite(v)}
    return sorted({v + d for v in found for d in (0.0, -1.0, 1.0, -0.5, 0.5)} | {-v for v in found})


def _near_guards(program: Program, drawn: dict[str, np.ndarray], values: Sequence[float],
                 seed: int) -> dict[str, np.ndarray]:
    """``drawn`` with every one of ``values`` (and 0) at a random element of every float or integer input
    that has as many elements (integers rounded), and about half of the other elements replaced by them
    too; masks and indices stay as drawn."""
    rng = np.random.default_rng(seed + 7919)
    keep = set(index_bounds(program)) | {s.name for s in program.inputs if s.dtype.kind == "bool"}
    out = dict(drawn)
    for spec in program.inputs:
        if spec.name in keep:
            continue
        pool = np.asarray([*values, 0.0])
        pool = np.unique(np.round(pool)) if spec.dtype.kind == "int" else pool
        x = np.array(drawn[spec.name], dtype=np.float64)
        flat = np.where(rng.random(size=x.size) < 0.5, rng.choice(pool, size=x.size), x.reshape(-1))
        at = rng.permutation(x.size)[:len(pool)]
        flat[at] = rng.permutation(pool)[:len(at)]
        out[spec.name] = flat.reshape(x.shape)
    return out


def trial_inputs(left: Program, lhs: Program, rhs: Program, symbols: Sequence[ScalarSymbol], seed: int,
                 inputs: str = "domain") -> dict[str, np.ndarray]:
    """The inputs one trial of ``numeric_search`` evaluates (``left``: a side with its dims bound); a
    counterexample replays from its ``seed`` and ``inputs``."""
    if inputs == "domain":
        drawn = random_inputs(left, seed=seed, domain_of=(lhs, rhs))
    elif inputs == "guards":
        drawn = _near_guards(left, random_inputs(left, seed=seed, domain_of=()), guard_values(lhs, rhs), seed)
    else:
        drawn = mixed_inputs(left, seed=seed, boundary=inputs == "boundary")
    out = signed_symbols(drawn, symbols)
    for sym in symbols:  # a strict sign constraint excludes 0 (boundary values include it)
        if sym.name in out and sym.constraint in (">0", "<0"):
            out[sym.name] = np.where(out[sym.name] == 0.0, 1.0 if sym.constraint == ">0" else -1.0, out[sym.name])
    return out


def numeric_search(lhs: Program, rhs: Program, symbols: Sequence[ScalarSymbol] = (), trials: int = 6,
                   seed: int = 0, rtol: float = 1e-6, atol: float = 1e-8) -> Counterexample | None:
    """Evaluate both sides in float64 at small random sizes; return the first mismatch. ``trials``
    draws respect the domains of both sides; where either side has a partial function, more trials ignore
    them (``MIXED_TRIALS``: N(0, 1), values on the domain boundaries; at larger sizes, for many sign
    combinations), so that a side that is NaN or inf where the other is finite shows; where either side
    compares with a constant, more trials put half the elements on and next to the constants
    (``GUARD_TRIALS``, ``guard_values``), so that both sides of every such guard are reached."""
    rng = np.random.default_rng(seed)
    names = sorted(lhs.free_dims | rhs.free_dims)
    kinds = ["domain"] * trials + (list(MIXED_TRIALS) if _partial(lhs) or _partial(rhs) else [])
    kinds += list(GUARD_TRIALS) if guard_values(lhs, rhs) else []
    for t, kind in enumerate(kinds):
        low, high = (6, 10) if kind != "domain" else (1, 3) if t % 2 == 0 else (2, 5)  # many elements: many signs
        bound = _bind_trial(lhs, rhs, names, rng, low, high, seed * 100 + t + 7)
        if bound is None:
            continue
        dims, left, right = bound
        trial_seed = seed * 100 + t
        inputs = trial_inputs(left, lhs, rhs, symbols, trial_seed, kind)
        with np.errstate(all="ignore"):
            a, b = interpret(left, inputs), interpret(right, inputs)
        a, b = (a if isinstance(a, tuple) else (a,)), (b if isinstance(b, tuple) else (b,))
        for k, (x, y) in enumerate(zip(a, b)):
            out = f"output {k} " if len(a) > 1 else ""
            if x.shape != y.shape:
                return Counterexample(dims, trial_seed, float("inf"), f"shapes {x.shape} vs {y.shape}", kind)
            fx, fy = np.isfinite(x), np.isfinite(y)
            if not np.array_equal(fx, fy):
                at = tuple(int(v) for v in np.argwhere(fx != fy)[0])
                side, other = ("lhs", "rhs") if not fx[at] else ("rhs", "lhs")
                values = {"lhs": x[at], "rhs": y[at]}
                return Counterexample(dims, trial_seed, float("inf"),
                                      f"{kind} inputs: the {side} is not finite where the {other} is "
                                      f"({out}at {list(at)}: {side} = {values[side]}, {other} = {values[other]:.6g})", kind)
            finite = fx & fy
            if finite.any() and not np.allclose(x[finite], y[finite], rtol=rtol, atol=atol):
                return Counterexample(dims, trial_seed, float(np.max(np.abs(x[finite] - y[finite]))),
                                      f"{kind} inputs: {out}max |lhs - rhs| = "
                                      f"{float(np.max(np.abs(x[finite] - y[finite]))):.3g}", kind)
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
        diffs, defined, outside = [], [], []
        for k in range(len(lhs.outputs)):
            evaluators = Evaluator(lhs, names, positive, negative), Evaluator(rhs, names, positive, negative)
            left, idx = evaluators[0].output(k, prefix=f"o{k}_")
            right, _ = evaluators[1].output(k, prefix=f"o{k}_")
            diffs.append((left - right, idx, lhs.outputs[k]))
            defined.append(tuple(e.domain(k, prefix=f"o{k}_") for e in evaluators))
            outside.append(tuple(e.outside(k) for e in evaluators))
            if any(m.binders for side in (left, right) for m in side.monos):
                sums_lemmas = ("sum_additivity", "sum_linearity", "sum_swap")
    except NoSemantics as e:
        return done("unknown", "semantics", str(e))
    q = _Query()
    for _, idx, node in diffs:
        q.facts += _ranges(q.ctx, lhs, idx, node)
    for s in symbols:
        q.facts += _constraint(q.ctx, s)
    for k, (ldom, rdom) in enumerate(defined):  # (a): each side defined where the other is
        at = f"output {k}: " if len(defined) > 1 else ""
        why = domain_mismatch(q, ldom, rdom, timeout_ms)
        if why:
            return done("unknown", "domain", at + why)
        why = finite_outside(q, ldom | rdom, outside[k], timeout_ms)  # (c): both not finite where undefined
        if why:
            return done("unknown", "nan", at + why)
    if all(d.is_zero for d, _, _ in diffs):
        return done("proven", "normal form", lemmas=sums_lemmas)
    conditions = [[c for c in sorted(ldom | rdom, key=repr) if not c[2] and c[1] != "lib"] for ldom, rdom in defined]
    goals = []
    for (diff, _, _), conds in zip(diffs, conditions):  # (b): where both sides are defined
        if not diff.is_zero:
            goals.append(z3.And(*[q.ctx.condition(c) for c in conds], q.ctx.poly(diff) != 0))
    solver = z3.Solver()
    solver.set("timeout", timeout_ms)
    solver.add(*q.facts, *q.ctx.axioms, z3.Or(goals))
    result = solver.check()
    if result == z3.unsat:
        return done("proven", "normal form + z3", lemmas=q.ctx.lemmas)
    from .induction import prove_by_induction  # lazy: induction and the prover call each other

    outcome = prove_by_induction(diffs, lhs, symbols, timeout_ms, conditions=conditions)
    if outcome is not None:
        return done("proven", "induction", lemmas=outcome)
    return done("unknown", "z3", f"z3 says {result} on the purified difference")


def domain_mismatch(q: _Query, ldom: frozenset, rdom: frozenset, timeout_ms: int) -> str | None:
    """Why the two sides are not defined at the same inputs (their domain conditions ``ldom``,
    ``rdom``, under the query's facts), or None when each side's conditions follow from the other's."""
    for side, goals, other, hyps in (("rhs", rdom, "lhs", ldom), ("lhs", ldom, "rhs", rdom)):
        gap = _domain_gap(q, goals, hyps, timeout_ms)
        if gap:
            more = f" (and {len(gap) - 1} more)" if len(gap) > 1 else ""
            return (f"the {side} is defined only where {domains.condition_str(gap[0])}{more}, which the {other}'s "
                    "domain does not imply")
    return None


def finite_outside(q: _Query, dom: frozenset, outside: tuple[tuple[frozenset, str], ...], timeout_ms: int) -> str | None:
    """Why a side may be finite where the (common) domain ``dom`` fails, where the normal forms say
    nothing about it (``nonfinite``), or None: neither side may, or ``dom`` holds everywhere."""
    for side, (kinds, why) in zip(("lhs", "rhs"), outside):
        if nonfinite.FINITE in kinds and _domain_gap(q, dom, frozenset(), timeout_ms):
            return (f"the {side} may be finite where its domain fails ({why}), where the normal forms say nothing "
                    "about it")
    return None


def _domain_gap(q: _Query, goals: frozenset, hyps: frozenset, timeout_ms: int) -> list[nf.Atom]:
    """The conditions in ``goals`` that do not follow from ``hyps`` and the query's facts ([] when all
    do). A goal's bound indices become fresh constants in range; a hypothesis over bound indices is
    instantiated at those constants where the ranges match; a library op's condition only matches itself."""
    missing = sorted(goals - hyps, key=repr)
    if not missing:
        return []
    if any(g[1] == "lib" for g in missing):
        return [g for g in missing if g[1] == "lib"]
    ctx = q.ctx
    known = [f for f in (ctx.condition(h) for h in sorted(hyps, key=repr) if not h[2]) if f is not None]
    failures = []
    for n, g in enumerate(missing):
        at = {v: nf.Ix.of(f"dom{n}_{k}") for k, (v, _) in enumerate(g[2])}
        ranges = []
        for v, length in g[2]:
            ranges += [ctx.ix(at[v]) >= 0, ctx.ix(at[v]) < ctx.ix(length.subst(at))]
        instances = []
        for h in sorted(hyps, key=repr):
            for mapping in _instances(h, g, at):
                formula = ctx.condition(h, mapping)
                if formula is not None:
                    instances.append(formula)
        negated = z3.And(*ranges, z3.Not(ctx.condition(g, at)))
        failures.append((g, [*known, *instances], negated))
    solver = z3.Solver()
    solver.set("timeout", timeout_ms)
    solver.add(*q.facts, *[f for _, fs, _ in failures for f in fs], *ctx.axioms, z3.Or([neg for _, _, neg in failures]))
    if solver.check() == z3.unsat:
        return []
    out = []
    for g, facts, negated in failures:  # which ones: each on its own
        one = z3.Solver()
        one.set("timeout", timeout_ms)
        one.add(*q.facts, *facts, *ctx.axioms, negated)
        if one.check() != z3.unsat:
            out.append(g)
    return out or [g for g, _, _ in failures]


def _instances(h: nf.Atom, g: nf.Atom, at: dict[str, nf.Ix]) -> list[dict[str, nf.Ix]]:
    """Assignments of the goal's bound-index constants to a hypothesis's binders with the same ranges."""
    if not h[2] or h[1] == "lib" or len(h[2]) > len(g[2]) or len(g[2]) > 4:
        return []
    lengths = {v: n.subst(at) for v, n in g[2]}
    out = []
    for chosen in itertools.permutations(list(at), len(h[2])):
        mapping = {hv: at[gv] for (hv, _), gv in zip(h[2], chosen)}
        if all(n.subst(mapping) == lengths[gv] for (_, n), gv in zip(h[2], chosen)):
            out.append(mapping)
    return out
