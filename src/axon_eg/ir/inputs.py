"""Random inputs for a Program: never zeros, positive where the program needs it.

An input that reaches an op's positive-domain operand (``meta["positive_inputs"]``: log, sqrt, rsqrt,
pow, batchnorm's running variance) through layout ops, casts and additions is drawn from
U(0.5, 2) (``POSITIVE``); every other input from N(0, 1) with exact zeros replaced, or (``tame=True``,
the hypothesis properties' inputs: numerically tame under any random program) from +-U(0.25, 2)
(``TAME``). This is the one input generator of the package; the measurement harness draws on the
device with torch's generator (it imports no axon_eg module) from the same ranges, which a test ties.

For comparing two programs (the prover's NumPy search), ``random_inputs(..., domain_of=(lhs, rhs))``
takes the positive inputs of *both* and also keeps denominators (reciprocal, division, a negative
power) away from zero: an input that reaches one through layout ops, casts, negation, additions and
products is drawn from +-U(0.5, 2). ``mixed_inputs`` ignores every domain (N(0, 1), or values on and
near the domain boundaries: -1, 0, 1, ...), so that a NaN or inf on one side only shows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from axon_eg.ir import ops as O
from axon_eg.ir.program import Program

_TRANSPARENT = set(O.positive_preserving())  # add, cast, layout ops: positive in, positive out
_NONZERO_TRANSPARENT = _TRANSPARENT | {"sub", "mul", "neg"}  # a product of nonzero values is nonzero
POSITIVE = (0.5, 2.0)  # every "positive" input: U(lo, hi)
TAME = (0.25, 2.0)  # random_inputs(tame=True): |x| drawn from U(lo, hi), random sign
BOUNDARY = (-2.0, -1.0, -0.5, 0.0, 0.0, 0.5, 1.0, 2.0)  # mixed_inputs(boundary=True): zero twice as often


def _reaching(program: Program, slots: Callable[[Any], Sequence[int]], transparent: set[str]) -> set[str]:
    """Names of the inputs that reach an operand slot ``slots(node)`` selects, through ``transparent`` ops."""
    need = [False] * len(program.nodes)
    for i in reversed(range(len(program.nodes))):
        node = program.nodes[i]
        chosen = slots(node)
        for slot, j in enumerate(node.inputs):
            if slot in chosen or (need[i] and node.op in transparent):
                need[j] = True
    return {n.attrs["name"] for n, flag in zip(program.nodes, need) if flag and n.op == "input"}


def positive_inputs(*programs: Program) -> set[str]:
    """Names of the inputs that must be positive for the reference to be finite (in any of ``programs``)."""
    out: set[str] = set()
    for program in programs:
        out |= _reaching(program, lambda n: O.get(n.op).meta.get("positive_inputs", ()), _TRANSPARENT)
    return out


_INDEX_TRANSPARENT = set(O.views()) | {"transpose", "slice", "concat", "cast", "where"}  # an index passes as is


def index_bounds(program: Program) -> dict[str, int]:
    """Input name -> the exclusive upper bound of the integer values it must hold: the inputs that reach a
    ``gather`` or ``index_select`` index (through views, slices, casts and ``where`` branches) are drawn in
    ``0 .. bound - 1``, the bound being the smallest indexed axis they reach."""
    bound: list[int | None] = [None] * len(program.nodes)
    for i in reversed(range(len(program.nodes))):
        node = program.nodes[i]
        if O.get(node.op).meta.get("indices") and len(node.inputs) == 2:
            size = int(program.concrete_shape(node.inputs[0])[node.attrs["axis"]])
            j = node.inputs[1]
            bound[j] = size if bound[j] is None else min(bound[j], size)
        if bound[i] is not None and node.op in _INDEX_TRANSPARENT:
            for slot, j in enumerate(node.inputs):
                if node.op == "where" and slot == 0:
                    continue
                bound[j] = bound[i] if bound[j] is None else min(bound[j], bound[i])
    return {n.attrs["name"]: b for n, b in zip(program.nodes, bound) if b is not None and n.op == "input"}


def _denominators(node: Any) -> tuple[int, ...]:
    if node.op == "pow" and node.attrs["exponent"] < 0:
        return (0,)
    return O.get(node.op).meta.get("nonzero_inputs", ())


def nonzero_inputs(*programs: Program) -> set[str]:
    """Names of the inputs that reach a denominator (reciprocal, division, a negative power) of any of
    ``programs``: kept away from zero by ``random_inputs(..., domain_of=...)``."""
    out: set[str] = set()
    for program in programs:
        out |= _reaching(program, _denominators, _NONZERO_TRANSPARENT)
    return out


def random_inputs(program: Program, seed: int = 0, *, scale: float = 1.0,
                  domain_of: Sequence[Program] | None = None, tame: bool = False) -> dict[str, np.ndarray]:
    """float64 arrays keyed by input name, for a program whose dims are bound (bool inputs as 0.0 / 1.0,
    integer ones as +-1 .. +-8, indices in range: ``index_bounds``). ``domain_of``: the
    programs whose domains the inputs must respect (positive inputs of all of them, denominators
    drawn from +-U(0.5, 2)); by default only ``program``'s positive inputs. ``tame``: the inputs that
    need not be positive get |x| in ``TAME`` with a random sign instead of N(0, ``scale``)."""
    rng = np.random.default_rng(seed)
    positive = positive_inputs(*(domain_of if domain_of is not None else (program,)))
    nonzero = nonzero_inputs(*domain_of) - positive if domain_of is not None else set()
    bounds = index_bounds(program)
    out: dict[str, np.ndarray] = {}
    for spec, node in zip(program.inputs, program.input_ids):
        shape = program.concrete_shape(node)
        if spec.name in bounds:  # indices into an axis of that size
            x = rng.integers(0, bounds[spec.name], size=shape).astype(np.float64)
        elif spec.dtype.kind == "bool":  # a mask, as 0.0 / 1.0: true with probability 1/2
            x = (rng.random(size=shape) < 0.5).astype(np.float64)
        elif spec.dtype.kind == "int":  # small integers, never zero: +-1 .. +-8
            x = rng.integers(1, 9, size=shape) * rng.choice((-1.0, 1.0), size=shape)
        elif spec.name in positive:
            x = rng.uniform(*POSITIVE, size=shape)
        elif spec.name in nonzero:
            x = rng.uniform(*POSITIVE, size=shape) * rng.choice((-1.0, 1.0), size=shape)
        elif tame:
            x = rng.uniform(*TAME, size=shape) * rng.choice((-1.0, 1.0), size=shape)
        else:
            x = rng.standard_normal(size=shape) * scale
            x = np.where(x == 0.0, scale, x)  # also for 0-d inputs, where NumPy returns a scalar
        out[spec.name] = np.asarray(x)
    return out


def mixed_inputs(program: Program, seed: int = 0, *, boundary: bool = False) -> dict[str, np.ndarray]:
    """float64 arrays that ignore every domain: N(0, 1), or (``boundary``) drawn from ``BOUNDARY``."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for spec, node in zip(program.inputs, program.input_ids):
        shape = program.concrete_shape(node)
        x = rng.choice(BOUNDARY, size=shape) if boundary else rng.standard_normal(size=shape)
        out[spec.name] = np.asarray(x, dtype=np.float64)
    return out
