"""The state of one random program under construction (part of :mod:`axon_eg.testing.strategies`): the
builder, the dims' sizes, the values made so far with their envelopes, and the attribute draws every op
generator shares (axes in range, attributes drawn from their declared kinds).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from axon_eg.ir import dims as D
from axon_eg.ir import ops as O
from axon_eg.ir.builder import Builder, Value
from axon_eg.ir.dims import Dim, Shape
from axon_eg.ir.dtypes import DType
from axon_eg.testing.envelopes import FRESH, LIMIT, Envelope

MAX_SIZE = 7  # named dims are bound to 1..MAX_SIZE: interpretation is instant
MAX_NUMEL = 4096  # no value gets more elements than this
CONSTANTS = (2.0, 0.5, 1.0, -1.0, 3.0, -0.5, 0.0, 1e-3)

Draw = Callable[[st.SearchStrategy[Any]], Any]


# ------------------------------------------------------------------------------------------------
# Generation state
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Val:
    value: Value
    env: Envelope

    @property
    def shape(self) -> Shape:
        return self.value.shape

    @property
    def ndim(self) -> int:
        return self.value.ndim


class Gen:
    """One program under construction: the builder, the dims' sizes and the values made so far."""

    def __init__(self, draw: Draw, allowed: frozenset[str], dtypes: tuple[DType, ...], sizes: Mapping[str, int],
                 symbolic: bool):
        self.draw, self.allowed, self.dtypes, self.sizes = draw, allowed, dtypes, sizes
        self.b = Builder("random")
        self.values: list[Val] = []  # inputs and op results
        self.results: list[Val] = []  # op results only
        self.dim_pool: tuple[Dim, ...] = (*(D.sym(n) for n in sizes), 1, 2, 3) if symbolic else (1, 2, 3, 4, 5)

    def conc(self, shape: Shape) -> tuple[int, ...]:
        return tuple(D.evaluate(d, self.sizes) for d in shape)

    def numel(self, shape: Shape) -> int:
        return math.prod(self.conc(shape))

    def dim(self) -> Dim:
        return self.draw(st.sampled_from(self.dim_pool))

    def shape(self, rank: int) -> Shape:
        dims = [self.dim() for _ in range(rank)]
        while self.numel(tuple(dims)) > MAX_NUMEL // 4:
            dims[max(range(rank), key=lambda i: self.conc((dims[i],))[0])] = 1
        return tuple(dims)

    def dtype(self) -> DType:
        return self.draw(st.sampled_from(self.dtypes))

    def fresh(self, shape: Shape) -> Val:
        value = Val(self.b.input(f"x{len(self.b.nodes)}", shape, self.dtype()), FRESH)
        self.values.append(value)
        return value

    def constant(self) -> Val:
        c = self.draw(st.sampled_from(CONSTANTS))
        return Val(self.b.constant(c, self.dtype()), Envelope(abs(c), abs(c), c > 0))

    def pick(self) -> Val:
        """An operand for the next step: mostly the latest result, so that steps chain."""
        how = self.draw(st.sampled_from(("latest", "result", "any", "latest", "latest")))
        if self.results and how != "any":
            return self.results[-1] if how == "latest" else self.draw(st.sampled_from(self.results[::-1]))
        return self.draw(st.sampled_from(self.values[::-1]))

    def operand(self, x: Val, min_rank: int, max_rank: int | None = None,
                ok: Callable[[Val], bool] = lambda v: True) -> Val:
        """``x`` if its rank fits, else another value that fits, else a fresh input."""
        def fits(v: Val) -> bool:
            return min_rank <= v.ndim and (max_rank is None or v.ndim <= max_rank) and ok(v)

        if fits(x):
            return x
        candidates = [v for v in self.values if fits(v)]
        if candidates and self.draw(st.booleans()):
            return self.draw(st.sampled_from(candidates))
        return self.fresh(self.shape(min_rank))

    def emit(self, op: O.OpDef, args: Iterable[Val], attrs: Mapping[str, Any], env: Envelope | None) -> Val | None:
        """Add ``op`` unless its envelope is unknown, too large, or its result too big."""
        if env is None or not env.mag <= LIMIT:
            return None
        value = self.b.emit(op.name, *(a.value for a in args), **attrs)
        if self.numel(value.shape) > MAX_NUMEL:
            return None  # left dead: Builder.build drops it
        out = Val(value, env)
        self.values.append(out)
        self.results.append(out)
        return out

    def attrs_of(self, op: O.OpDef, shapes: tuple[Shape, ...], attrs: Mapping[str, Any]) -> O.Attrs:
        """The canonical attributes ``op`` will get, to compute envelopes before emitting."""
        a = op.make_attrs(attrs)
        return op.canon(shapes, a) if op.canon is not None else a


def draw_axis(g: Gen, rank: int) -> int:
    return g.draw(st.integers(-rank, rank - 1))


def _axes(g: Gen, rank: int) -> tuple[int, ...]:
    """A set of axes, some written negative; () means all of them."""
    picked = g.draw(st.lists(st.integers(0, rank - 1), unique=True, max_size=rank)) if rank else []
    return tuple(a - rank if g.draw(st.booleans()) else a for a in picked)


def generic_attrs(g: Gen, op: O.OpDef, x: Val) -> dict[str, Any] | None:
    """Attributes drawn from their declared kinds: ``axis``/``axes`` in range, choices, small values."""
    out: dict[str, Any] = {}
    for a in op.attrs:
        kind = a.kind.removeprefix("optional_")
        if a.name == "axis" and kind == "int":
            if x.ndim == 0:
                return None
            out[a.name] = draw_axis(g, x.ndim)
        elif a.name == "axes" and kind == "ints":
            out[a.name] = _axes(g, x.ndim)
        elif a.choices is not None:
            out[a.name] = g.draw(st.sampled_from(a.choices))
        elif not a.required and g.draw(st.booleans()):
            continue
        elif kind in ("bool", "int", "float", "dtype"):
            out[a.name] = g.draw({"bool": st.booleans(), "int": st.integers(0, 2),
                                  "float": st.sampled_from((0.5, 1.0, 2.0)), "dtype": st.sampled_from(g.dtypes)}[kind])
        elif a.required:
            return None
    return out

