"""Is a rule that holds over the reals also safe in floating point? A differential test.

The prover shows ``lhs == rhs`` over the reals; here we check that running ``rhs`` instead of
``lhs`` in a low-precision kernel never makes results worse. :func:`check_float_safety` answers for
both directions: ``forward`` (replace lhs by rhs) and ``backward`` (replace rhs by lhs).

Criterion. Each trial binds the dims to fresh random sizes (3..17; every other trial one dim is long,
64..256, so that sums run over many terms) and draws inputs at one of :data:`SCALES` in turn: N(0,1),
N(0,10), N(0,60) and 100 + N(0,1) (a large offset, where cancellation shows). Inputs that some op of
either side needs positive (:func:`axon_eg.ir.inputs.positive_inputs`) are log-uniform in
[0.5, 2 * scale] instead (plus the offset). For each precision in ``precisions`` (fp32 and bf16):

- the inputs are rounded to the precision, the *truth* is the float64 reference (:func:`interpret`)
  of lhs on them (of rhs where lhs's float64 value is not finite), and each side runs under
  :func:`axon_eg.ir.lowp.interpret_lowp` (every intermediate rounded, overflow to inf);
- elements whose truth is not finite are ignored; per output, a side's *error* is the largest
  ``|result - truth|`` over the elements where both sides are finite, divided by the output's
  magnitude (the largest ``|truth|`` over those elements; 1 when it is 0);
- the candidate side (rhs for ``forward``) is *worse* than the reference side when it is non-finite
  (inf/nan) at an element where the reference side and the truth are finite, or when its error
  exceeds ``max(FACTOR * reference error, TOLERANCE[precision])`` (FACTOR 4; tolerances 1e-4 for
  fp32, 2e-2 for bf16, 2e-3 for fp16). The tolerance floor keeps rounding noise, which differs
  between any two evaluation orders, from counting; the factor lets a side that is already
  inaccurate be replaced by one about as inaccurate.

A direction is safe when the candidate is worse in no trial and no precision. The check is
deterministic for a seed; it is a test, not a proof: a direction reported safe may still lose
accuracy on inputs no trial drew. Note that rounding every intermediate models unfused kernels: a
fused kernel keeps intermediates in fp32 registers, where e.g. ``exp(a + b)`` in bf16 is exact
enough; here the rounded ``a + b`` makes it worse than ``exp(a) * exp(b)`` for large ``a + b``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from axon_eg.errors import ProgramError, ShapeError
from axon_eg.ir import dims as D
from axon_eg.ir.inputs import positive_inputs
from axon_eg.ir.interpret import interpret
from axon_eg.ir.lowp import interpret_lowp, precision_name, round_to
from axon_eg.ir.program import Program

FACTOR = 4.0
TOLERANCE = {"fp32": 1e-4, "bf16": 2e-2, "fp16": 2e-3}
SIZES = (3, 17)  # dims are drawn from this range ...
LONG_SIZES = (64, 256)  # ... except one dim in every other trial
MAX_NUMEL = 1 << 17  # sizes are redrawn smaller while some value has more elements than this


@dataclass(frozen=True)
class Scale:
    """Inputs drawn as loc + N(0, scale); positive-domain inputs as loc + log-uniform [0.5, 2 * scale]."""

    name: str
    loc: float
    scale: float


SCALES = (Scale("N(0,1)", 0.0, 1.0), Scale("N(0,10)", 0.0, 10.0), Scale("N(0,60)", 0.0, 60.0),
          Scale("100+N(0,1)", 100.0, 1.0))


@dataclass(frozen=True)
class FloatSafety:
    forward: bool  # replacing lhs by rhs never made results worse
    backward: bool  # replacing rhs by lhs never made results worse
    detail: str  # the first failure of each unsafe direction, or a summary


def probe_scales() -> tuple[Scale, ...]:
    """The input distributions the trials cycle through."""
    return SCALES


def check_float_safety(lhs: Program, rhs: Program, *, trials: int = 16, seed: int = 0,
                       precisions: Sequence[str] = ("fp32", "bf16")) -> FloatSafety:
    """Run both sides on ``trials`` random input sets in each precision (see the module docstring)."""
    precisions = [precision_name(p) for p in precisions]
    names = sorted(lhs.free_dims | rhs.free_dims)
    _check_same_inputs(lhs, rhs)
    rng = np.random.default_rng(seed)
    failure: dict[str, str | None] = {"forward": None, "backward": None}
    for t in range(trials):
        scale = SCALES[t % len(SCALES)]
        long = bool(names) and (t // len(SCALES)) % 2 == 1
        sides, sizes = _bind_both(lhs, rhs, names, rng, long)
        inputs = _draw_inputs(sides, rng, scale)
        where = f"trial {t} ({scale.name}" + "".join(f", {k}={v}" for k, v in sizes.items()) + ")"
        for precision in precisions:
            rounded = {k: round_to(v, precision) for k, v in inputs.items()}
            args = [{s.name: rounded[s.name] for s in p.inputs} for p in sides]
            exact = [_outputs(interpret(p, a)) for p, a in zip(sides, args)]
            low = [_outputs(interpret_lowp(p, a, precision)) for p, a in zip(sides, args)]
            for d, cand, ref in (("forward", 1, 0), ("backward", 0, 1)):
                if failure[d] is None:
                    why = _worse(low[cand], low[ref], exact, precision)
                    if why:
                        side = ("lhs", "rhs")
                        failure[d] = f"{precision} {where}: {side[cand]} {why} (against {side[ref]})"
        if all(failure.values()):
            break
    if not any(failure.values()):
        detail = f"safe both ways: {trials} trials in {', '.join(precisions)}"
    else:
        detail = "; ".join(f"{d}: {failure[d] or 'safe'}" for d in ("forward", "backward"))
    return FloatSafety(failure["forward"] is None, failure["backward"] is None, detail)


def _outputs(result: np.ndarray | tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    return result if isinstance(result, tuple) else (result,)


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
    for attempt in range(40):
        shrink = attempt // 8  # every 8 failed attempts halve the ranges (down to 1..)
        lo = max(1, SIZES[0] - shrink)
        sizes = {n: int(rng.integers(lo, max(lo, SIZES[1] >> shrink) + 1)) for n in names}
        if long:
            size = int(rng.integers(LONG_SIZES[0], LONG_SIZES[1] + 1))
            sizes[names[int(rng.integers(len(names)))]] = max(1, size >> shrink)
        try:
            sides = [p.bind({n: sizes[n] for n in p.free_dims}) if p.free_dims else p for p in (lhs, rhs)]
        except (ShapeError, ProgramError):
            continue
        if max(math.prod(p.concrete_shape(i)) for p in sides for i in range(len(p.nodes))) <= MAX_NUMEL:
            return sides, sizes
    if all(p.free_dims <= set(p.bindings) for p in (lhs, rhs)):
        return [lhs, rhs], {**lhs.bindings, **rhs.bindings}
    raise ProgramError(f"no sizes for dims {names} fit both sides of the rule")


def _draw_inputs(sides: list[Program], rng: np.random.Generator, scale: Scale) -> dict[str, np.ndarray]:
    positive = positive_inputs(sides[0]) | positive_inputs(sides[1])
    out: dict[str, np.ndarray] = {}
    for p in sides:
        for spec, node in zip(p.inputs, p.input_ids):
            if spec.name in out:
                continue
            shape = p.concrete_shape(node)
            if spec.name in positive:
                x = np.exp(rng.uniform(math.log(0.5), math.log(2.0 * scale.scale), size=shape))
            else:
                x = rng.standard_normal(size=shape) * scale.scale
            out[spec.name] = np.asarray(scale.loc + x, dtype=np.float64)
    return out


def _worse(cand: tuple[np.ndarray, ...], ref: tuple[np.ndarray, ...],
           exact: list[tuple[np.ndarray, ...]], precision: str) -> str | None:
    """Why ``cand`` is worse than ``ref`` against the truth, or None."""
    for o, (c, r, t_lhs, t_rhs) in enumerate(zip(cand, ref, *exact)):
        truth = np.where(np.isfinite(t_lhs), t_lhs, t_rhs)
        known = np.isfinite(truth)
        broke = known & np.isfinite(r) & ~np.isfinite(c)
        out = f"output {o}: " if len(cand) > 1 else ""
        if broke.any():
            i = np.unravel_index(int(np.argmax(broke)), broke.shape)
            return (f"{out}is non-finite at {int(broke.sum())}/{broke.size} elements where the other side is "
                    f"finite (e.g. {c[i]} vs {r[i]}, truth {truth[i]:.6g})")
        both = known & np.isfinite(c) & np.isfinite(r)
        if not both.any():
            continue
        mag = float(np.max(np.abs(truth[both]))) or 1.0
        err_c = float(np.max(np.abs(c[both] - truth[both]))) / mag
        err_r = float(np.max(np.abs(r[both] - truth[both]))) / mag
        bound = max(FACTOR * err_r, TOLERANCE[precision])
        if err_c > bound:
            return (f"{out}has relative error {err_c:.3g} > max({FACTOR:g} x {err_r:.3g}, "
                    f"{TOLERANCE[precision]:g})")
    return None


__all__ = ["FACTOR", "SCALES", "TOLERANCE", "FloatSafety", "Scale", "check_float_safety", "probe_scales"]
