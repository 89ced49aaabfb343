"""Hypothesis strategies: random well-typed Programs over the op registry, and inputs for them.

``programs()`` builds a program op by op. The ops it draws come from ``ops.REGISTRY``: every op of a
kind with a generator here (element-wise by ``meta["arity"]``, reduce, scan, contraction, layout,
composite, library) is drawn, so an op registered later under an existing kind is picked up without
editing this file (its attributes drawn from their declared kinds and choices). An op whose
attributes cannot be drawn goes in ``SKIPPED_OPS`` with the reason; a test checks that every
registry op is drawn, a source, or skipped.

Shapes use named dims (``M``, ``N``, ``K``, ``B``), size-1 dims and small ints. The sizes the names
will be bound to (1..7) are drawn first and every attribute is chosen knowing them, so a program is
valid symbolically and once bound.

Values stay numerically tame under ``program_inputs`` (|x| in [0.25, 2]; positive inputs in [0.5, 2]):
each value carries an :class:`Envelope` (bounds on |x|, its sign), and an op that could overflow or
leave its domain (exp, pow, log, reciprocal, div, square, matmul, ...) is applied only where the
envelope keeps the float64 reference finite; otherwise it is applied to a fresh input.

Modules: this one has the public strategies (``programs``, ``program_inputs``, ``dims_and_sizes``,
``dim_expressions``, ...); :mod:`axon_eg.testing.envelopes` the magnitude bounds,
:mod:`axon_eg.testing.gen_state` the program under construction and :mod:`axon_eg.testing.op_generators`
one generator per kind of op (import each name from its own module).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import reject
from hypothesis import strategies as st

from axon_eg.errors import DtypeError, InvalidAttribute, ShapeError
from axon_eg.ir import dims as D
from axon_eg.ir import inputs as I
from axon_eg.ir import ops as O
from axon_eg.ir.dims import Dim
from axon_eg.ir.dtypes import DType, as_dtype, bf16, fp16, fp32
from axon_eg.ir.program import Program
from axon_eg.testing.envelopes import BINARY_ENV, REDUCE_ENV, UNARY_ENV
from axon_eg.testing.gen_state import MAX_SIZE, Draw, Gen, Val
from axon_eg.testing.op_generators import (
    COMPOSITES,
    LAYOUT_ATTRS,
    binary,
    composite,
    contraction,
    layout,
    library,
    reduce,
    scan,
    select,
    unary,
)

DIM_NAMES = ("M", "N", "K", "B")
SOURCE_OPS = O.sources()  # made by the strategy itself, never drawn as a step
SKIPPED_OPS: dict[str, str] = {  # op name -> why it is not drawn
    **{op.name: "returns or reads integer indices (meta indices): tests/ir/test_torch_import.py (case indices) "
                "and tests/backends/test_triton_masks.py draw programs with them"
       for op in O.all_ops() if op.meta.get("indices")},
    **{op.name: "opaque to the prover (meta opaque): tests/ir/test_torch_import.py (cases scans, bits) draws it"
       for op in O.all_ops() if op.meta.get("opaque")},
}


# ------------------------------------------------------------------------------------------------
# Public strategies
# ------------------------------------------------------------------------------------------------
_KIND_GENERATORS: dict[O.OpKind, Callable[[Gen, O.OpDef, Val], Val | None]] = {
    O.OpKind.REDUCE: reduce, O.OpKind.SCAN: scan, O.OpKind.CONTRACTION: contraction, O.OpKind.LAYOUT: layout,
    O.OpKind.COMPOSITE: composite, O.OpKind.LIBRARY: library,
}
_KNOWN = {*UNARY_ENV, *BINARY_ENV, *REDUCE_ENV, *LAYOUT_ATTRS, *COMPOSITES, "concat", "matmul"}


def _known(op: O.OpDef) -> bool:
    """Ops drawn with attributes made for them: an error building one is a bug, not a misfit."""
    return op.name in _KNOWN or (op.kind is O.OpKind.LIBRARY and "spatial" in op.meta)


def _generator(op: O.OpDef) -> Callable[[Gen, O.OpDef, Val], Val | None] | None:
    if op.kind is O.OpKind.ELEMENTWISE:
        return {1: unary, 2: binary, 3: select}.get(op.meta.get("arity"))
    return _KIND_GENERATORS.get(op.kind)


def drawn_ops(*, allow_composites: bool = True, allow_library: bool = True, allow_logical: bool = True) -> list[str]:
    """Names of the registry ops ``programs`` draws (sources and SKIPPED_OPS excluded); ``allow_logical``:
    comparisons, logic and ``where`` (meta ``logical``), whose boolean values a kernel computing in fp32 may
    flip where two compared values are within its rounding of each other."""
    return [op.name for op in O.all_ops()
            if _generator(op) is not None and op.name not in SKIPPED_OPS
            and (allow_composites or op.kind is not O.OpKind.COMPOSITE)
            and (allow_library or op.kind is not O.OpKind.LIBRARY)
            and (allow_logical or not op.meta.get("logical"))]


def dims_and_sizes(names: tuple[str, ...] = DIM_NAMES, max_size: int = MAX_SIZE, values: tuple[int, ...] | None = None,
                   ) -> st.SearchStrategy[tuple[tuple[D.Sym, ...], dict[str, int]]]:
    """The named dims as Syms, and the sizes (1..max_size, or one of ``values``) they will be bound to."""
    syms = tuple(D.sym(n) for n in names)
    size = st.sampled_from(values) if values else st.integers(1, max_size)
    return st.fixed_dictionaries({n: size for n in names}).map(lambda sizes: (syms, sizes))


def _tamed(g: Gen, x: Val) -> Val | None:
    """``x`` squashed through sigmoid (after tanh if large): positive, bounded away from 0 and 1."""
    for name in ("tanh", "sigmoid") if x.env.mag > 10 else ("sigmoid",):
        if name not in g.allowed or x is None:
            return None
        x = unary(g, O.get(name), x)
    return x


def _step(g: Gen, op: O.OpDef) -> Val | None:
    generate = _generator(op)
    assert generate is not None
    x = g.pick()
    # when x's envelope or shape does not suit op: x tamed (keeps the chain), else a fresh input
    for operand in (lambda: x, lambda: _tamed(g, x), lambda: g.fresh(x.shape)):
        try:
            arg = operand()
            out = None if arg is None else generate(g, op, arg)
        except (ShapeError, InvalidAttribute, DtypeError):
            if _known(op):
                raise  # a bug here or in the registry: let the test show it
            out = None
        if out is not None:
            return out
    return None


@st.composite
def _programs(draw: Draw, max_nodes: int, chosen: tuple[str, ...], allowed: frozenset[str],
              dtypes: tuple[DType, ...], symbolic: bool, bound: bool, sizes: tuple[int, ...] | None) -> Program:
    _, sizes = draw(dims_and_sizes(values=sizes))
    g = Gen(draw, allowed, dtypes, sizes, symbolic)
    for _ in range(draw(st.integers(1, 3))):
        g.fresh(g.shape(draw(st.sampled_from((2, 1, 3, 4, 0)))))
    made = [v for v in (_step(g, O.get(draw(st.sampled_from(chosen)))) for _ in range(draw(st.integers(1, max_nodes))))
            if v is not None]
    if not made:
        reject()
    outputs = [made[-1].value]
    used, stack = set(), [outputs[0].id]
    while stack:
        used.add(stack[-1])
        stack.extend(set(g.b.nodes[stack.pop()].inputs) - used)
    dangling = [v.value for v in made if v.value.id not in used]  # a second output from them adds nodes
    if dangling and draw(st.booleans()):
        outputs.append(draw(st.sampled_from(dangling[::-1])))
    program = g.b.build(outputs)
    if bound and program.free_dims:
        program = program.bind({name: sizes[name] for name in program.free_dims})
    return program


def programs(max_nodes: int = 8, ops: Iterable[str] | None = None, dtypes: Iterable[Any] = (bf16, fp16, fp32),
             allow_composites: bool = True, allow_library: bool = False, symbolic: bool = True,
             bound: bool = True, sizes: Iterable[int] | None = None,
             allow_logical: bool = False) -> st.SearchStrategy[Program]:
    """Random well-typed Programs of 1..max_nodes drawn op steps (a step may add a partner input or a
    keepdims reduction) with 1-2 outputs, over inputs of rank 0-4.

    ``ops`` restricts the drawn ops (and the helper reductions) to those names, overriding the
    ``allow_*`` flags; ``symbolic=False`` uses int dims only; ``bound=False`` leaves named dims unbound;
    ``sizes`` are the sizes named dims are bound to (default 1..7), e.g. (1, 2, 3, 7, 16).
    """
    everything = drawn_ops()
    if ops is None:
        chosen = drawn_ops(allow_composites=allow_composites, allow_library=allow_library,
                           allow_logical=allow_logical)
    else:
        chosen = list(dict.fromkeys(ops))
        unknown = [name for name in chosen if name not in everything]
        if unknown:
            raise ValueError(f"programs(ops=...): {unknown} are not drawable ops; see drawn_ops() and SKIPPED_OPS")
    if not chosen:
        raise ValueError("programs(): no ops to draw")
    return _programs(max_nodes, tuple(chosen), frozenset(chosen), tuple(as_dtype(d) for d in dtypes), symbolic, bound,
                     tuple(sizes) if sizes is not None else None)


def make_inputs(program: Program, seed: int) -> dict[str, np.ndarray]:
    """The properties' inputs: ``ir.inputs.random_inputs(tame=True)`` (|x| in [0.25, 2], never zero; in
    [0.5, 2] where ``positive_inputs`` says)."""
    return I.random_inputs(program, seed, tame=True)


def program_inputs(program: Program) -> st.SearchStrategy[dict[str, np.ndarray]]:
    """Inputs for a bound program (see make_inputs), drawn from a seed."""
    return st.integers(0, 2**32 - 1).map(lambda seed: make_inputs(program, seed))


@st.composite
def programs_with_inputs(draw: Draw, **kwargs: Any) -> tuple[Program, dict[str, np.ndarray]]:
    """A bound program from ``programs(**kwargs)`` and inputs for it."""
    program = draw(programs(**{**kwargs, "bound": True}))
    return program, draw(program_inputs(program))




# ------------------------------------------------------------------------------------------------
# Dim expressions (for shape arithmetic properties)
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DimExpr:
    """An expression tree over named dims: ``dim()`` builds it with dims.py, ``value()`` in Python ints."""

    op: str  # "name", "int", "+", "-", "*", "//"
    args: tuple[Any, ...]

    def dim(self) -> Dim:
        if self.op == "name":
            return D.sym(self.args[0])
        if self.op == "int":
            return self.args[0]
        a, b = (x.dim() for x in self.args)
        return {"+": D.add, "-": lambda p, q: D.add(p, D.mul(q, -1)), "*": D.mul, "//": D.floordiv}[self.op](a, b)

    def value(self, sizes: Mapping[str, int]) -> int:
        if self.op in ("name", "int"):
            return sizes[self.args[0]] if self.op == "name" else self.args[0]
        a, b = (x.value(sizes) for x in self.args)
        return {"+": a + b, "-": a - b, "*": a * b, "//": a // b if b else 0}[self.op]

    def __str__(self) -> str:
        return str(self.args[0]) if self.op in ("name", "int") else f"({self.args[0]} {self.op} {self.args[1]})"


def dim_expressions(names: tuple[str, ...] = DIM_NAMES, max_leaves: int = 6, floordiv: bool = True,
                    positive: bool = False) -> st.SearchStrategy[DimExpr]:
    """Random dim expressions over ``names``. Divisors are positive for sizes >= 1 (names, positive
    ints, their sums and products), so ``value`` never divides by zero; ``positive=True`` gives only
    such expressions."""
    name = st.sampled_from(names).map(lambda n: DimExpr("name", (n,)))

    def pair(ops: tuple[str, ...], kids: st.SearchStrategy[DimExpr]) -> st.SearchStrategy[DimExpr]:
        return st.builds(lambda op, a, b: DimExpr(op, (a, b)), st.sampled_from(ops), kids, kids)

    positives = st.recursive(st.one_of(name, st.integers(1, 4).map(lambda i: DimExpr("int", (i,)))),
                             lambda kids: pair(("+", "*"), kids), max_leaves=min(max_leaves, 3))
    if positive:
        return positives
    leaves = st.one_of(name, st.integers(-3, 5).map(lambda i: DimExpr("int", (i,))))

    def extend(kids: st.SearchStrategy[DimExpr]) -> st.SearchStrategy[DimExpr]:
        ring = pair(("+", "-", "*"), kids)
        if not floordiv:
            return ring
        return st.one_of(ring, st.builds(lambda a, b: DimExpr("//", (a, b)), kids, positives))

    return st.recursive(leaves, extend, max_leaves=max_leaves)
