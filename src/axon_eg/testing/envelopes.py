"""Envelopes for the random-program strategies (part of :mod:`axon_eg.testing.strategies`): bounds on a
value's magnitude and sign, and how each element-wise op, reduction and scan transforms them. An op is
applied only where its envelope keeps the float64 reference finite (``LIMIT``); ``None`` from a rule
means "not here". ``INPUT_LO`` .. ``INPUT_HI`` (positive: from ``POSITIVE_LO``) is what inputs are drawn from.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from axon_eg.ir import ops as O
from axon_eg.ir.inputs import POSITIVE, TAME

LIMIT = 1e30  # no value's envelope exceeds this magnitude
INPUT_LO, INPUT_HI = TAME  # what make_inputs draws (ir.inputs.random_inputs(tame=True))
POSITIVE_LO = POSITIVE[0]
assert POSITIVE[1] == INPUT_HI, "an envelope bounds positive and other inputs by one INPUT_HI"


# ------------------------------------------------------------------------------------------------
# Envelopes: what a value's magnitude can be
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Envelope:
    """lo <= |x| <= mag for every element; pos: every element > 0; input_like: built from inputs only
    through ops that ``inputs.positive_inputs`` sees through, so it is made positive on demand."""

    mag: float
    lo: float = 0.0
    pos: bool = False
    input_like: bool = False

    def positive(self) -> Envelope | None:
        """The envelope as a positive-domain operand (log, sqrt, pow, ...), or None if it may be <= 0."""
        if self.pos and self.lo > 1e-6:
            return self
        return Envelope(self.mag, POSITIVE_LO, True) if self.input_like else None


FRESH = Envelope(INPUT_HI, INPUT_LO, input_like=True)
BOOLEAN = Envelope(1.0)  # a comparison's or logical op's value: 0 or 1
UNKNOWN = Envelope(LIMIT)  # an op this module has no envelope for: finite, nothing more is known


def through(op: str, *envs: Envelope) -> bool:
    return bool(O.get(op).meta.get("preserves_positive")) and all(e.input_like for e in envs)


def same(op: str) -> Callable[[Envelope, Any], Envelope]:
    return lambda e, a: Envelope(e.mag, e.lo, e.pos, through(op, e))


def tame(e: Envelope) -> Envelope | None:
    return UNKNOWN if e.mag <= 10 else None


def _exp(e: Envelope, a: Any) -> Envelope | None:
    return Envelope(math.exp(e.mag), math.exp(-e.mag), True) if e.mag <= 10 else None


def _log(e: Envelope, a: Any) -> Envelope | None:
    p = e.positive()
    return p and Envelope(max(abs(math.log(p.lo)), abs(math.log(p.mag))))


def _pow(e: Envelope, a: Any) -> Envelope | None:
    p = e.positive()
    ends = (p.lo ** a["exponent"], p.mag ** a["exponent"]) if p else ()
    return p and Envelope(max(ends), min(ends), True)


def _clamp(e: Envelope, a: Any) -> Envelope:
    low, high = (min(max(v, a["lo"]), a["hi"]) for v in (-e.mag, e.mag))
    lo = low if low > 0 else (-high if high < 0 else 0.0)
    return Envelope(max(abs(low), abs(high)), lo, low > 0)


def _softplus(e: Envelope, a: Any) -> Envelope:
    lo = min(math.log1p(math.exp(-a["beta"] * e.mag)) / a["beta"], max(a["threshold"], 0.0) / a["beta"])
    return Envelope(e.mag + math.log(2.0) / a["beta"], lo, True)


def _sigmoid(m: float) -> float:
    return 0.5 * (1.0 + math.tanh(0.5 * m))


UNARY_ENV: dict[str, Callable[[Envelope, Any], Envelope | None]] = {
    "neg": lambda e, a: Envelope(e.mag, e.lo),
    "exp": _exp,
    "log": _log,
    "sqrt": lambda e, a: (p := e.positive()) and Envelope(math.sqrt(p.mag), math.sqrt(p.lo), True),
    "rsqrt": lambda e, a: (p := e.positive()) and Envelope(1 / math.sqrt(p.lo), 1 / math.sqrt(p.mag), True),
    "reciprocal": lambda e, a: Envelope(1 / e.lo, 1 / e.mag, e.pos) if e.lo > 0 else None,
    "abs": lambda e, a: Envelope(e.mag, e.lo, e.lo > 0),
    "square": lambda e, a: Envelope(e.mag**2, e.lo**2, e.lo > 0),
    "relu": lambda e, a: Envelope(e.mag),
    "leaky_relu": lambda e, a: Envelope(e.mag * max(1, abs(a["slope"])), e.lo * min(1, abs(a["slope"])), e.pos),
    "sigmoid": lambda e, a: Envelope(1.0, _sigmoid(-e.mag), True),
    "tanh": lambda e, a: Envelope(1.0, math.tanh(e.lo), e.pos),
    "sin": lambda e, a: Envelope(1.0),
    "cos": lambda e, a: Envelope(1.0),
    "silu": lambda e, a: Envelope(e.mag + 1),
    "gelu": lambda e, a: Envelope(e.mag + 1),
    "mish": lambda e, a: Envelope(e.mag + 1),
    "hardswish": lambda e, a: Envelope(e.mag + 1),
    "hardsigmoid": lambda e, a: Envelope(1.0),
    "softplus": _softplus,
    "clamp": _clamp,
    "pow": _pow,
    "erf": lambda e, a: Envelope(1.0, math.erf(e.lo), e.pos),
    "cast": same("cast"),
    "logical_not": lambda e, a: BOOLEAN,
    "causal_mask": lambda e, a: Envelope(max(e.mag, abs(a["fill"])), min(e.lo, abs(a["fill"])),
                                         e.pos and a["fill"] > 0),
}

BINARY_ENV: dict[str, Callable[[Envelope, Envelope], Envelope | None]] = {
    "add": lambda x, y: Envelope(x.mag + y.mag, x.lo + y.lo if x.pos and y.pos else 0.0, x.pos and y.pos,
                                 through("add", x, y)),
    "sub": lambda x, y: Envelope(x.mag + y.mag),
    "mul": lambda x, y: Envelope(x.mag * y.mag, x.lo * y.lo, x.pos and y.pos),
    "div": lambda x, y: Envelope(x.mag / y.lo, x.lo / y.mag, x.pos and y.pos) if y.lo > 0 else None,
    "maximum": lambda x, y: Envelope(max(x.mag, y.mag), max(e.lo for e in (x, y) if e.pos) if x.pos or y.pos else 0.0,
                                     x.pos or y.pos),
    "minimum": lambda x, y: Envelope(max(x.mag, y.mag), min(x.lo, y.lo) if x.pos and y.pos else 0.0, x.pos and y.pos),
    **{op.name: (lambda x, y: BOOLEAN) for op in O.all_ops() if op.meta.get("logical") and op.meta.get("arity") == 2},
}

# reductions and scans: (envelope, number of elements combined into one output)
REDUCE_ENV: dict[str, Callable[[Envelope, int], Envelope]] = {
    "sum": lambda e, n: Envelope(e.mag * n, e.lo if e.pos else 0.0, e.pos),
    "mean": lambda e, n: Envelope(e.mag, e.lo if e.pos else 0.0, e.pos),
    "max": lambda e, n: Envelope(e.mag, e.lo, e.pos),
    "min": lambda e, n: Envelope(e.mag, e.lo, e.pos),
    "logsumexp": lambda e, n: Envelope(e.mag + math.log(n)),
    "cumsum": lambda e, n: Envelope(e.mag * n, e.lo if e.pos else 0.0, e.pos),
}

