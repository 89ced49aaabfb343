"""Is a rule that holds over the reals also safe in floating point? A differential test.

The prover shows ``lhs == rhs`` over the reals; here we check that running ``rhs`` instead of
``lhs`` in a low-precision kernel never makes results worse. :func:`check_float_safety` answers for
both directions: ``forward`` (replace lhs by rhs) and ``backward`` (replace rhs by lhs);
:func:`recheck` compares a stored verdict with a fresh one (``axon-eg rules verify``).

Criterion. Trial t (22 by default) binds the dims to fresh random sizes, 3..17; in odd trials one dim
is long, 64..256, and the others 2..6, so that sums run over many terms; the dims that stand for a
symbolic attribute (a conv's stride, padding + 1, dilation, groups: ``op_semantics.attribute_dims``) are
1..3 and never the long one. Its inputs are drawn from
``SCHEDULE[t % 11]``, one of the distributions :data:`SCALES`:

- ``N(0,1)``, ``N(0,10)``, ``N(0,60)`` and ``N(0,1e-3)`` (small values);
- ``U(-1e3,1e3)``: realistic magnitudes of both signs;
- ``+100+N(0,1)`` and ``-100+N(0,1)``: every input near +100, or every input near -100;
- ``±100 split`` (3 of the 11 slots): each input near +100 or -100 by a *sign pattern*. The signed
  inputs (all but the positive-domain inputs and the sign-constrained symbols), in name order, are
  numbered j = 0, 1, ...; split trial number k (counting split trials only) makes input j negative
  when bit ``k mod K`` of j is set (K: the bits that number the inputs, at least 1), with every sign
  flipped when ``k // K`` is odd. Any two inputs have opposite signs in some split trial (their
  numbers differ in some bit), so ``a + b`` cancels there; the 6 split trials of 22 cover every pair
  of up to 64 signed inputs;
- ``±100 mixed``: each element near +100 or -100 at random (cancellation inside one tensor).

Inputs that some op of either side needs positive (:func:`axon_eg.ir.inputs.positive_inputs`) stay
positive: ``loc +`` log-uniform in [spread / 2, 2 * spread] for the normal distributions (``loc``
the centre's magnitude: 100 or 0), ``|U(-1e3,1e3)|`` for the uniform one. A symbolic scalar
(``symbols``: objects with ``.name`` and ``.constraint``, one of ">0", ">=0", "<0", None; a rank-0
input of both sides) with a sign constraint has that sign and magnitude ``|100 + N(0,1)|`` in the
four ±100 distributions, log-uniform in [1e-2, 1e2] in the others. An unconstrained symbol, a symbol that
is not an input, and every other rank-0 input are ordinary inputs.

Each trial runs in every precision of ``precisions`` (fp32, bf16 and fp16). fp16's normal range is
only 2^-14..2^16, so there the values of the large distributions (N(0,60), U(-1e3,1e3) and the ±100
ones) are multiplied by 2^-4 and those of N(0,1e-3) by 2^4 (powers of two: relative rounding and
cancellation stay as they are; the detail shows the factor as ``x2^-4``). Then:

- the inputs are rounded to the precision; the *truth* is the float64 reference of lhs on them (of
  rhs where lhs's float64 value is not finite), and each side runs with every intermediate rounded
  (:class:`axon_eg.ir.lowp.Plan`, as :func:`axon_eg.ir.lowp.interpret_lowp`; overflow to inf);
- the truth is *known* at the elements where it is finite and at most :data:`LIMIT` (half the
  format's largest value: beyond it a correctly rounded side may overflow); other elements are ignored;
- per output, a side's *error* is the largest ``|result - truth|`` over the known elements where both
  sides are finite, divided by the output's magnitude there (the largest ``|truth|``; 1 when it is 0);
- the candidate side (rhs for ``forward``) is *worse* than the reference side when it is non-finite
  (inf/nan) at a known element where the reference side is finite, or when its error exceeds
  ``max(FACTOR * reference error, TOLERANCE[precision])`` (FACTOR 4; tolerances 1e-4 for fp32,
  2e-2 for bf16, 2e-3 for fp16). The tolerance floor keeps rounding noise, which differs between
  any two evaluation orders, from counting; the factor lets a side that is already inaccurate be
  replaced by one about as inaccurate;
- the draw is *too large* for the format when some element's truth is finite but not known, or both
  sides are non-finite at a known element (fp16 overflows at 65504; exp(100) everywhere). Then only
  non-finite results count (errors over the few small elements left would mislead), and the
  comparison is repeated on the inputs times 2^-4, 2^-8 and 2^-12 (exact scalings, signs kept) until
  the draw fits; a failure at any of these scalings counts.

A direction is safe when the candidate is worse in no trial, no precision and no scaling. The detail
names, for each unsafe direction, the first failure found (trial by trial, precision by precision:
precision, trial, distribution with its sign pattern, scaling, sizes, and why) and the other
precisions that fail too. The check is deterministic for a seed; it is a test, not a proof: a
direction reported safe may still lose accuracy on inputs no trial drew, and a rule near the bounds
may change verdict with the seed. Rounding every intermediate models unfused kernels: a fused
kernel keeps intermediates in fp32 registers, where e.g. ``exp(a + b)`` in bf16 is exact enough;
here the rounded ``a + b`` makes it worse than ``exp(a) * exp(b)`` for large ``a + b``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from axon_eg.errors import ProgramError, ShapeError
from axon_eg.ir import dims as D
from axon_eg.ir.inputs import positive_inputs
from axon_eg.ir.lowp import Plan, precision_name, round_to
from axon_eg.ir.program import Program
from axon_eg.semantics.op_semantics import attribute_dims

FACTOR = 4.0
TOLERANCE = {"fp32": 1e-4, "bf16": 2e-2, "fp16": 2e-3}
PRECISIONS = ("fp32", "bf16", "fp16")
SIZES = (3, 17)  # dims are drawn from this range ...
LONG_SIZES = (64, 256)  # ... except in every other trial: one dim from this range ...
LONG_OTHERS = (2, 6)  # ... and the others from this one
ATTRIBUTE_SIZES = (1, 3)  # symbolic attributes (a conv's stride, padding + 1, dilation, groups) from this one
MAX_NUMEL = 1 << 17  # sizes are redrawn smaller while some value has more elements than this
SHRINK, SHRINKS = 2.0**-4, 3  # inputs scaled by SHRINK up to SHRINKS times while both sides overflow
SYMBOL_RANGE = (1e-2, 1e2)  # magnitudes of sign-constrained symbols where the distribution has no centre
POSITIVE = {">0": 1.0, ">=0": 1.0, "<0": -1.0}  # sign constraints of symbols
LIMIT = {"fp32": 2.0**127, "bf16": 2.0**127, "fp16": 2.0**15}  # truths above this (half the format's
# largest value, where a correctly rounded side may already overflow) are ignored


@dataclass(frozen=True)
class Scale:
    """An input distribution: ``centre + N(0, spread)`` with the centre ``±loc``, its sign from
    ``signs`` ("+", "-", "split": the trial's sign pattern per input, "mixed": at random per element);
    or, with ``uniform``, U(-spread, spread). In fp16 the values are multiplied by ``fp16``."""

    name: str
    loc: float = 0.0
    spread: float = 1.0
    signs: str = "+"
    uniform: bool = False
    fp16: float = 1.0

    def factor(self, precision: str) -> float:
        """The power of two the values are multiplied by in ``precision``."""
        return self.fp16 if precision == "fp16" else 1.0


IN_FP16 = 2.0**-4  # large values scaled into fp16's range; small ones scaled up out of its subnormals
N01 = Scale("N(0,1)")
N10 = Scale("N(0,10)", spread=10.0)
N60 = Scale("N(0,60)", spread=60.0, fp16=IN_FP16)
SMALL = Scale("N(0,1e-3)", spread=1e-3, fp16=1 / IN_FP16)
PLUS = Scale("+100+N(0,1)", 100.0, fp16=IN_FP16)
MINUS = Scale("-100+N(0,1)", 100.0, signs="-", fp16=IN_FP16)
SPLIT = Scale("±100 split", 100.0, signs="split", fp16=IN_FP16)
MIXED = Scale("±100 mixed", 100.0, signs="mixed", fp16=IN_FP16)
WIDE = Scale("U(-1e3,1e3)", spread=1e3, uniform=True, fp16=IN_FP16)
SCALES = (N01, N10, N60, SMALL, PLUS, MINUS, SPLIT, MIXED, WIDE)
SCHEDULE = (N01, SPLIT, N10, PLUS, MIXED, SPLIT, N60, WIDE, SMALL, MINUS, SPLIT)  # trial t: SCHEDULE[t % 11]


@dataclass(frozen=True)
class FloatSafety:
    forward: bool  # replacing lhs by rhs never made results worse
    backward: bool  # replacing rhs by lhs never made results worse
    detail: str  # the first failure of each unsafe direction, or a summary


def probe_scales() -> tuple[Scale, ...]:
    """The input distributions the trials cycle through."""
    return SCALES


def check_float_safety(lhs: Program, rhs: Program, *, symbols: Sequence[Any] = (), trials: int = 22, seed: int = 0,
                       precisions: Sequence[str] = PRECISIONS) -> FloatSafety:
    """Run both sides on ``trials`` random input sets in each precision (see the module docstring).

    ``symbols``: the rule's symbolic scalars (``.name``, ``.constraint``), rank-0 inputs of both sides."""
    precisions = [precision_name(p) for p in precisions]
    names = sorted(lhs.free_dims | rhs.free_dims)
    _check_same_inputs(lhs, rhs)
    draw = _Inputs(lhs, rhs, symbols)
    rng = np.random.default_rng(seed)
    failures: dict[str, dict[str, str]] = {"forward": {}, "backward": {}}  # direction -> precision -> why
    splits = 0
    for t in range(trials):
        scale = SCHEDULE[t % len(SCHEDULE)]
        signs = draw.pattern(splits) if scale.signs == "split" else {}
        splits += scale.signs == "split"
        sides, sizes = _bind_both(lhs, rhs, names, rng, long=bool(names) and t % 2 == 1)
        inputs = draw(sides, rng, scale, signs)
        where = f"trial {t} ({_describe(scale, signs)}" + "".join(f", {k}={v}" for k, v in sizes.items()) + ")"
        plans = _plans(sides)
        for precision in precisions:
            if all(precision in f for f in failures.values()):
                continue
            for direction, why in _trial(plans, inputs, precision, scale.factor(precision)):
                failures[direction].setdefault(precision, f"{precision} {where}{why}")
        if all(p in f for f in failures.values() for p in precisions):
            break
    return _verdict(failures, trials, precisions)


def recheck(lhs: Program, rhs: Program, symbols: Sequence[Any], stored: Mapping[str, Any], *,
            seed: int = 0) -> str | None:
    """Recompute the verdict of a stored rule; None when it agrees with ``stored`` (``{"forward":
    bool, "backward": bool, ...}``), else a one-line reason naming what changed and why."""
    now = check_float_safety(lhs, rhs, symbols=symbols, seed=seed)
    changed = [f"{d} {_word(bool(stored[d]))} -> {_word(getattr(now, d))}" for d in ("forward", "backward")
               if bool(stored[d]) != getattr(now, d)]
    return f"{', '.join(changed)} ({now.detail})" if changed else None


def _word(safe: bool) -> str:
    return "safe" if safe else "unsafe"


def _verdict(failures: dict[str, dict[str, str]], trials: int, precisions: Sequence[str]) -> FloatSafety:
    if not any(failures.values()):
        return FloatSafety(True, True, f"safe both ways: {trials} trials in {', '.join(precisions)}")
    parts = []
    for d in ("forward", "backward"):
        found = failures[d]
        if not found:
            parts.append(f"{d}: safe")
            continue
        first = next(iter(found))  # in the order found: trial by trial, precision by precision
        others = [p for p in precisions if p in found and p != first]
        parts.append(f"{d}: {found[first]}" + (f" [also unsafe in {', '.join(others)}]" if others else ""))
    return FloatSafety(not failures["forward"], not failures["backward"], "; ".join(parts))


# -- one trial -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Plans:
    exact: tuple[Plan, Plan]  # float64 references (composites as themselves)
    low: tuple[Plan, Plan]  # rounded runs (composites expanded)


def _plans(sides: list[Program]) -> _Plans:
    exact = tuple(Plan(p, expand=False) for p in sides)
    low = tuple(e if e.program is p.expand() else Plan(p) for e, p in zip(exact, sides))
    return _Plans(exact, low)  # type: ignore[arg-type]


def _trial(plans: _Plans, inputs: dict[str, np.ndarray], precision: str, fit: float) -> Iterable[tuple[str, str]]:
    """(direction, why) for each way the sides compare badly in ``precision``, on the inputs times
    ``fit`` and, while that draw is too large for the format, on the inputs scaled further down."""
    for k in range(SHRINKS + 1):
        factor = fit * SHRINK**k
        rounded = {n: round_to(v * factor, precision) for n, v in inputs.items()}
        truth = _truth(plans, rounded)
        low = [p.run(rounded, precision, rounded=True) for p in plans.low]
        worse, too_large = _compare(low, truth, precision)
        at = f" x2^{round(math.log2(factor))}" if factor != 1 else ""
        for cand, ref, direction in ((1, 0, "forward"), (0, 1, "backward")):
            if worse[cand]:
                yield direction, f"{at}: {('lhs', 'rhs')[cand]} {worse[cand]} (against {('lhs', 'rhs')[ref]})"
        if not too_large:
            return


def _truth(plans: _Plans, rounded: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    left = plans.exact[0].run(rounded)
    if all(np.isfinite(t).all() for t in left):
        return left
    right = plans.exact[1].run(rounded)
    return tuple(np.where(np.isfinite(a), a, b) for a, b in zip(left, right))


def _compare(low: list[tuple[np.ndarray, ...]], truth: tuple[np.ndarray, ...],
             precision: str) -> tuple[list[str | None], bool]:
    """Why each side (lhs, rhs) is worse than the other against the truth (None: it is not), and
    whether the draw is too large for the format (then only non-finite results count)."""
    outputs = [_Output.of(a, b, t, LIMIT[precision]) for a, b, t in zip(*low, truth)]
    too_large = any(o.too_large() for o in outputs)
    worse: list[str | None] = [None, None]
    for k, o in enumerate(outputs):
        prefix = f"output {k}: " if len(outputs) > 1 else ""
        errors = None if too_large else o.errors()
        for c in (0, 1):
            why = o.non_finite(c)
            if why is None and errors is not None and errors[c] > max(FACTOR * errors[1 - c], TOLERANCE[precision]):
                why = (f"has relative error {errors[c]:.3g} > max({FACTOR:g} x {errors[1 - c]:.3g}, "
                       f"{TOLERANCE[precision]:g})")
            if worse[c] is None and why is not None:
                worse[c] = prefix + why
    return worse, too_large


@dataclass(frozen=True)
class _Output:
    """One output of both sides against the truth. The truth is *known* where it is finite and at
    most LIMIT; ``dense``: known everywhere and both sides finite everywhere (no masks needed)."""

    sides: tuple[np.ndarray, np.ndarray]
    truth: np.ndarray
    limit: float
    dense: bool

    @staticmethod
    def of(left: np.ndarray, right: np.ndarray, truth: np.ndarray, limit: float) -> _Output:
        dense = bool(np.abs(truth).max(initial=0.0) <= limit and np.isfinite(left).all() and np.isfinite(right).all())
        return _Output((left, right), truth, limit, dense)

    @cached_property
    def _masks(self) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
        """(known, (lhs finite, rhs finite))."""
        known = np.isfinite(self.truth) & (np.abs(self.truth) <= self.limit)
        return known, (np.isfinite(self.sides[0]), np.isfinite(self.sides[1]))

    def too_large(self) -> bool:
        """Some truth is finite but beyond LIMIT, or both sides are non-finite where it is known."""
        if self.dense:
            return False
        known, finite = self._masks
        return bool((np.isfinite(self.truth) & ~known).any() or (known & ~finite[0] & ~finite[1]).any())

    def non_finite(self, c: int) -> str | None:
        """Why side ``c`` is non-finite where the truth is known and the other side finite, or None."""
        if self.dense:
            return None
        known, finite = self._masks
        broke = known & finite[1 - c] & ~finite[c]
        if not broke.any():
            return None
        i = np.unravel_index(int(np.argmax(broke)), broke.shape)
        return (f"is non-finite at {int(broke.sum())}/{broke.size} elements where the other side is finite "
                f"(e.g. {self.sides[c][i]} vs {self.sides[1 - c][i]}, truth {self.truth[i]:.6g})")

    def errors(self) -> tuple[float, float] | None:
        """Each side's relative error over the elements where the truth is known and both are finite."""
        if self.dense:
            t, sides = self.truth, self.sides
        else:
            known, finite = self._masks
            both = known & finite[0] & finite[1]
            if not both.any():
                return None
            t, sides = self.truth[both], (self.sides[0][both], self.sides[1][both])
        mag = float(np.max(np.abs(t), initial=0.0)) or 1.0
        return float(np.max(np.abs(sides[0] - t), initial=0.0)) / mag, float(np.max(np.abs(sides[1] - t), initial=0.0)) / mag


# -- inputs --------------------------------------------------------------------------------------
class _Inputs:
    """Draws the inputs of a rule's two sides (see the module docstring)."""

    def __init__(self, lhs: Program, rhs: Program, symbols: Sequence[Any]) -> None:
        names = sorted({s.name for p in (lhs, rhs) for s in p.inputs})
        self.positive = positive_inputs(lhs) | positive_inputs(rhs)
        self.sign = {s.name: POSITIVE[s.constraint] for s in symbols if s.constraint in POSITIVE and s.name in names}
        self.signed = [n for n in names if n not in self.positive and n not in self.sign]
        self.bits = max(1, (len(self.signed) - 1).bit_length())

    def pattern(self, k: int) -> dict[str, float]:
        """The signs of the k-th split trial: input j negative when bit k mod K of j is set, flipped
        in every other round of K."""
        bit, flip = k % self.bits, (k // self.bits) % 2 == 1
        return {n: -1.0 if ((j >> bit) & 1) != flip else 1.0 for j, n in enumerate(self.signed)}

    def __call__(self, sides: list[Program], rng: np.random.Generator, scale: Scale,
                 signs: Mapping[str, float]) -> dict[str, np.ndarray]:
        shapes: dict[str, tuple[int, ...]] = {}
        for p in sides:
            for spec, node in zip(p.inputs, p.input_ids):
                shapes.setdefault(spec.name, p.concrete_shape(node))
        return {n: self.one(n, shapes[n], rng, scale, signs) for n in sorted(shapes)}

    def one(self, name: str, shape: tuple[int, ...], rng: np.random.Generator, scale: Scale,
            signs: Mapping[str, float]) -> np.ndarray:
        if name in self.sign:
            if scale.loc:
                magnitude = np.abs(scale.loc + rng.standard_normal(size=shape) * scale.spread)
            else:
                magnitude = _log_uniform(rng, SYMBOL_RANGE, shape)
            return np.asarray(self.sign[name] * magnitude, dtype=np.float64)
        if scale.uniform:
            x = rng.uniform(-scale.spread, scale.spread, size=shape)
            return np.asarray(np.abs(x) if name in self.positive else x, dtype=np.float64)
        if name in self.positive:
            spread = (scale.spread / 2, scale.spread * 2)
            return np.asarray(scale.loc + _log_uniform(rng, spread, shape), dtype=np.float64)
        centre: Any = scale.loc
        if scale.signs == "-":
            centre = -scale.loc
        elif scale.signs == "split":
            centre = signs.get(name, 1.0) * scale.loc
        elif scale.signs == "mixed":
            centre = np.where(rng.random(size=shape) < 0.5, -scale.loc, scale.loc)
        return np.asarray(centre + rng.standard_normal(size=shape) * scale.spread, dtype=np.float64)


def _log_uniform(rng: np.random.Generator, bounds: tuple[float, float], shape: tuple[int, ...]) -> np.ndarray:
    return np.exp(rng.uniform(math.log(bounds[0]), math.log(bounds[1]), size=shape))


def _describe(scale: Scale, signs: Mapping[str, float]) -> str:
    if not signs:
        return scale.name
    return f"{scale.name} " + " ".join(f"{n}{'+' if s > 0 else '-'}" for n, s in signs.items())


# -- shapes --------------------------------------------------------------------------------------
def _check_same_inputs(lhs: Program, rhs: Program) -> None:
    specs = {s.name: s.shape for s in lhs.inputs}
    for s in rhs.inputs:
        if specs.setdefault(s.name, s.shape) != s.shape:
            raise ProgramError(f"input {s.name!r} has different shapes in lhs and rhs")
    if len(lhs.outputs) != len(rhs.outputs):
        raise ProgramError(f"lhs has {len(lhs.outputs)} outputs, rhs {len(rhs.outputs)}")
    for k, (a, b) in enumerate(zip(lhs.outputs, rhs.outputs)):
        if lhs.nodes[a].shape != rhs.nodes[b].shape:
            raise ProgramError(f"output {k} has shape {D.format_shape(lhs.nodes[a].shape)} in lhs, "
                               f"{D.format_shape(rhs.nodes[b].shape)} in rhs")


def _bind_both(lhs: Program, rhs: Program, names: list[str], rng: np.random.Generator,
               long: bool) -> tuple[list[Program], dict[str, int]]:
    """Both sides bound to the same random sizes; smaller sizes are tried while binding fails or
    a value gets too large; the sides' own bindings are the last resort."""
    free = [sorted(p.free_dims) for p in (lhs, rhs)]
    attrs = attribute_dims(names)
    plain = [n for n in names if n not in attrs]
    for attempt in range(40):
        shrink = attempt // 8  # every 8 failed attempts halve the ranges (down to 1..)
        low, high = LONG_OTHERS if long else SIZES
        lo = max(1, low - shrink)
        sizes = {n: int(rng.integers(lo, max(lo, high >> shrink) + 1)) for n in plain}
        sizes.update({n: int(rng.integers(ATTRIBUTE_SIZES[0], ATTRIBUTE_SIZES[1] + 1)) for n in sorted(attrs)})
        if long and plain:
            size = int(rng.integers(LONG_SIZES[0], LONG_SIZES[1] + 1))
            sizes[plain[int(rng.integers(len(plain)))]] = max(1, size >> shrink)
        try:
            sides = [p.bind({n: sizes[n] for n in f}) if f else p for p, f in zip((lhs, rhs), free)]
        except (ShapeError, ProgramError):
            continue
        if max(math.prod(p.concrete_shape(i)) for p in sides for i in range(len(p.nodes))) <= MAX_NUMEL:
            return sides, sizes
    if all(p.free_dims <= set(p.bindings) for p in (lhs, rhs)):
        return [lhs, rhs], {**lhs.bindings, **rhs.bindings}
    raise ProgramError(f"no sizes for dims {names} fit both sides of the rule")


__all__ = ["FACTOR", "PRECISIONS", "SCALES", "SCHEDULE", "TOLERANCE", "FloatSafety", "Scale", "check_float_safety",
           "probe_scales", "recheck"]
