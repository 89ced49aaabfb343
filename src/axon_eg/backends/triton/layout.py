"""Layout groups (transpose, slice, concat and views, nothing computed) as one Triton kernel.

A group whose output's innermost axis is not its input's innermost axis (``[M, N] -> [N, M]``,
``[B, M, N] -> [B, N, M]``, any such permutation, with slices and concats around it) is a tiled
transpose. Let ``c`` be the output's innermost (contiguous) axis and ``q`` the output axis that walks
the input's contiguous axis. Each program takes one ``[TILE_C, TILE_Q]`` tile of the (c, q) plane,
the other axes fixed:

* it loads the tile in the input's order: rows of ``TILE_Q`` contiguous input elements (coalesced
  reads along the input's contiguous axis);
* ``tl.trans`` turns it into the output's order; Triton implements the layout change by staging the
  tile through shared memory (padded / swizzled against bank conflicts);
* it stores rows of ``TILE_C`` contiguous output elements (coalesced writes).

Values move in their own dtype (no fp32 round trip, half the shared memory for bf16), and the element
offsets become 64-bit only when a tensor has 2**31 elements or more. Everything else (slices,
concats, permutations that keep the innermost axis) is a plain copy with an index map on load:
:func:`elementwise.lower`, whose reads are then as contiguous as the writes.

Tile sizes: the planner gives layout groups ``BLOCK`` (elements per program) and ``num_warps``
(``extract.templates.LayoutTile``); the tile is square, ``TILE = sqrt(BLOCK)`` rounded down to a power of
two (at least 16, ``LayoutTile.square``) unless the group's tiling names ``TILE``, and shrinks to the
extent of a short axis. Measured on an H200 (Triton 3.6,
bf16 8192 x 8192): 3.4 TB/s with 32 x 32 tiles, 3.7-3.9 TB/s with 64 x 64 and 128 x 128 (a device copy
reaches about 4.3), against 0.6 TB/s for ``x.t().contiguous()``.
"""

from __future__ import annotations

import math
import re

from axon_eg.extract.fusion import FusionPlan, reads_through_window
from axon_eg.extract.templates import Tiling
from axon_eg.ir import ops as O
from axon_eg.ir import traced

from . import elementwise
from .base import INT32_LIMIT, GroupKernel, NotLowerable, attr, cdiv, contiguous_strides, resources
from .elementwise import Index, _Emitter
from .templates import LayoutTile

Sources = tuple[int | None, ...]  # per dim of a value: the output axis its index follows (None: a constant index)


def _pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def _several(n: int) -> bool:
    """Whether a count of tiles may exceed 1: a run-time one may (``ir.traced``; the general code is right
    for 1 too), a fixed one when it does."""
    return isinstance(n, traced.Traced) or n > 1


def _innermost(shape: tuple[int, ...]) -> int | None:
    """The innermost axis with more than one element (the one that is contiguous in memory)."""
    return next((k for k in reversed(range(len(shape))) if shape[k] > 1), None)


class _Axes:
    """Which output axis indexes each dim of each value of the group, tracked back from the output
    through the group's index maps; ``loads`` collects it for every tensor read from HBM."""

    def __init__(self, plan: FusionPlan, gi: int):
        self.program = plan.program
        self.inside = set(plan.groups[gi].nodes)
        self.loads: list[tuple[int, Sources]] = []

    def walk(self, n: int, src: Sources) -> None:
        node = self.program.nodes[n]
        shape = tuple(self.program.concrete_shape(n))
        src = tuple(s if d > 1 else None for s, d in zip(src, shape))
        if node.is_constant:
            return
        if n not in self.inside:
            self.loads.append((n, src))
            return
        ins = [tuple(self.program.concrete_shape(j)) for j in node.inputs]
        if node.op == "transpose":
            perm = tuple(attr(self.program, n, "perm"))
            back: list[int | None] = [None] * len(perm)
            for k, p in enumerate(perm):
                back[p] = src[k]
            self.walk(node.inputs[0], tuple(back))
        elif node.op in ("slice", "concat", "flip"):  # the same axes, their index shifted or reversed
            for j in node.inputs:
                self.walk(j, src)
        elif O.is_view(node.op):
            self.walk(node.inputs[0], self._view(src, shape, ins[0], node.op))
        else:
            raise NotLowerable(f"{node.op} in a layout group")

    @staticmethod
    def _view(src: Sources, shape: tuple[int, ...], arg: tuple[int, ...], op: str) -> Sources:
        if op == "broadcast_to":
            tail = src[len(src) - len(arg):] if arg else ()
            return tuple(s if a > 1 else None for s, a in zip(tail, arg))
        # a view that only adds or drops size-1 dims keeps the order of the others
        big = [s for s, d in zip(src, shape) if d > 1]
        if len(src) != len(shape):  # never let next() below run dry (a StopIteration in a generator crashes)
            raise NotLowerable(f"view of {list(shape)} from sources of rank {len(src)}")
        if [d for d in shape if d > 1] != [d for d in arg if d > 1]:
            raise NotLowerable(f"reshape {list(arg)} -> {list(shape)} regroups axes; the tiled transpose needs them apart")
        it = iter(big)
        return tuple(next(it) if d > 1 else None for d in arg)


class _Tile(_Emitter):
    """The element-wise emitter over a ``[TILE_C, TILE_Q]`` tile, loading values in their own dtype;
    ``stored`` maps a read that is not row-major to its physical axis order (a channels-last conv output:
    ``(0, 2, 3, 1)``, physical dim k holding logical axis ``perm[k]``)."""

    def __init__(self, plan: FusionPlan, gi: int, domain: tuple[int, ...], dom: Index,
                 stored: dict[int, tuple[int, ...]] | None = None):
        super().__init__(plan, gi, domain, dom)
        self.stored = stored or {}

    def flat_stored(self, n: int, idx: Index, shape: tuple[int, ...]) -> str:
        """The address of logical index ``idx`` of a read stored in ``self.stored[n]``'s axis order."""
        perm = self.stored[n]
        physical = contiguous_strides(tuple(shape[p] for p in perm))
        stride = {p: physical[k] for k, p in enumerate(perm)}
        terms = [i if stride[a] == 1 else f"{i} * {stride[a]}" for a, (i, d) in enumerate(zip(idx, shape))
                 if d != 1 and i != "0"]
        return " + ".join(terms) or "0"

    def value(self, n: int, idx: Index, cond: str | None = None) -> str:
        if n in self.inside or self.program.nodes[n].is_constant:
            return super().value(n, idx, cond)
        cond = self._guard(n, idx, cond)
        key = (n, idx, cond)
        if key not in self.memo:
            if n not in self.reads:
                self.reads.append(n)
            # != 0: a condition on the dims alone (scalars) would make the mask int32 under the interpreter
            mask = "mask" if cond is None else f"(mask & ({cond})) != 0"
            name = f"v{n}" if idx == self.dom and cond is None else f"v{n}_{len(self.memo)}"
            shape = tuple(self.program.concrete_shape(n))
            addr = self.flat_stored(n, idx, shape) if n in self.stored else self.flat(idx, shape)
            if not re.search(r"\b(offs|i\d+)\b", addr):  # one element for the whole tile (all its axes are 1):
                # a scalar load; Triton refuses a block mask on a scalar pointer, and the element exists
                self.lines.append(f"{name} = tl.load(p{n}{'' if addr == '0' else ' + ' + addr})")
            else:
                self.lines.append(f"{name} = tl.load(p{n} + {addr}, mask={mask}, other=0.0)")
            self.memo[key] = name
        return self.memo[key]


def _route(plan: FusionPlan, gi: int) -> tuple[tuple[int, ...], int, int] | None:
    """(domain, the output's contiguous axis c, the reads' q) for a tiled transpose, None for an element-wise
    copy (some read's contiguous axis must differ from the output's); NotLowerable for float64."""
    program = plan.program
    outs = plan.outputs_of(gi)
    elementwise.no_fp64(plan, gi)
    domain = tuple(program.concrete_shape(outs[0]))
    c = _innermost(domain)
    if c is None or any(tuple(program.concrete_shape(o)) != domain for o in outs):
        return None
    axes = _Axes(plan, gi)
    try:
        for o in outs:
            axes.walk(o, tuple(range(len(domain))))
    except NotLowerable:
        return None
    moved = [s[k] for j, s in axes.loads if (k := _innermost(tuple(program.concrete_shape(j)))) is not None]
    moved = [q for q in moved if q is not None and q != c]
    if not moved:  # every read is already contiguous along the output's innermost axis: a plain copy
        return None
    q = max(set(moved), key=lambda a: (moved.count(a), -a))
    return domain, c, q


def check(plan: FusionPlan, gi: int, tiling: Tiling | None, warp_size: int | None = None,
          isa: str | None = None) -> bool:
    """NotLowerable with :func:`lower`'s reason when it cannot lower the group, without generating code;
    True when it can (the element-wise copy's reasons, or the tiled transpose's: an op its emitter lacks)."""
    if _route(plan, gi) is None:
        return elementwise.check(plan, gi, tiling, warp_size, isa)
    LayoutTile.read(tiling)
    elementwise.computable(plan, gi)
    return True


def lower(plan: FusionPlan, gi: int, tiling: Tiling | None, name: str, warp_size: int | None = None,
          isa: str | None = None) -> GroupKernel:
    """A tiled transpose when some read's contiguous axis is not the output's, else a plain copy."""
    route = _route(plan, gi)
    if route is None:
        return elementwise.lower(plan, gi, tiling, name, warp_size, isa)
    check(plan, gi, tiling, warp_size, isa)
    return _transpose(plan, gi, tiling, name, warp_size, *route)


def stored_route(plan: FusionPlan, gi: int, node: int, perm: tuple[int, ...]) -> tuple[tuple[int, ...], int, int] | None:
    """(domain, c, q) of an element-wise group that reads ``node`` stored in axis order ``perm`` (a
    channels-last conv output) as a tiled transpose: every output of the group has ``node``'s shape (or, where
    the group reads ``node`` through a pooling's windows, ``fusion.reads_through_window``, the pooled shape),
    whose contiguous axis (``perm[-1]``, its longest-strided logical one being the output's innermost) differs
    from the output's; None otherwise (the caller then makes ``node`` row-major first)."""
    program = plan.program
    shape = tuple(program.concrete_shape(node))
    outs = plan.outputs_of(gi)
    if outs and reads_through_window(plan, gi, node):  # a pooling's windows: the domain is the pooled output
        shape = tuple(program.concrete_shape(outs[0]))
    if not outs or any(tuple(program.concrete_shape(o)) != shape for o in outs):
        return None
    if any(program.nodes[n].dtype.name == "fp64" for n in plan.groups[gi].nodes):
        return None
    c, q = _innermost(shape), perm[-1]
    if c is None or shape[q] == 1 or c == q:
        return None
    return shape, c, q


def lower_stored(plan: FusionPlan, gi: int, tiling: Tiling | None, name: str, warp_size: int,
                 node: int, perm: tuple[int, ...], also: dict[int, tuple[int, ...]] | None = None) -> GroupKernel:
    """Element-wise group ``gi`` reading ``node`` stored in axis order ``perm``, as one tiled transpose
    (``stored_route``; NotLowerable where it does not apply or the element-wise emitter lacks an op); ``also``
    names other reads stored in that order (a channels-last chain's output read by a residual add)."""
    route = stored_route(plan, gi, node, perm)
    if route is None:
        raise NotLowerable(f"the group does not read node {node} as a tiled transpose of its {list(perm)} layout")
    LayoutTile.read(tiling)
    elementwise.computable(plan, gi)
    return _transpose(plan, gi, tiling, name, warp_size, *route, stored={**(also or {}), node: perm})


class _Physical(_Tile):
    """``_Tile`` over a 1-d block in a stored read's physical order: that read, at the block's own index, is at
    ``offs`` (contiguous: Triton vectorizes the load), not at the sum its logical indices give."""

    def flat_stored(self, n: int, idx: Index, shape: tuple[int, ...]) -> str:
        if idx == self.dom and shape == tuple(self.domain):
            return "offs"
        return super().flat_stored(n, idx, shape)


def lower_physical(plan: FusionPlan, gi: int, tiling: Tiling | None, name: str, warp_size: int,
                   node: int, perm: tuple[int, ...], also: dict[int, tuple[int, ...]] | None = None) -> GroupKernel:
    """Element-wise group ``gi`` reading ``node`` stored in axis order ``perm`` (a channels-last conv output)
    and writing its outputs stored in that order too (for a channels-last conv that reads them next): one pass
    over the elements in physical order, every load and store along the channels, no transpose. Per-channel
    operands (a batch norm's scale and shift) are read by the channel index; any other read by its logical
    index; ``also`` names other reads stored in that order. NotLowerable where an output's shape is not
    ``node``'s or the emitter lacks an op."""
    program = plan.program
    outs = plan.outputs_of(gi)
    shape = tuple(program.concrete_shape(node))
    if not outs or any(tuple(program.concrete_shape(o)) != shape for o in outs):
        raise NotLowerable(f"an output of the group is not of node {node}'s shape {list(shape)}")
    elementwise.no_fp64(plan, gi)
    elementwise.computable(plan, gi)
    tile = LayoutTile.read(tiling)
    total = math.prod(shape)
    block = min(tile.BLOCK, _pow2(total))
    wide = any(math.prod(program.concrete_shape(j)) >= INT32_LIMIT for j in (*outs, *plan.inputs_of(gi)))
    head = ["pid = tl.program_id(0).to(tl.int64)" if wide else "pid = tl.program_id(0)",
            "offs = pid * BLOCK + tl.arange(0, BLOCK)",
            f"mask = offs < {total}",
            f"# logical indices of physical order {list(perm)}"]
    physical = tuple(shape[p] for p in perm)
    strides = contiguous_strides(physical)
    dom = ["0"] * len(shape)
    for k, (axis, d, st) in enumerate(zip(perm, physical, strides)):
        if d == 1:
            continue
        e = "offs" if st == 1 else f"(offs // {st})"
        head.append(f"i{axis} = {e if k == 0 else f'({e} % {d})'}")
        dom[axis] = f"i{axis}"
    em = _Physical(plan, gi, shape, tuple(dom), {**(also or {}), node: perm})
    results = [em.value(o, tuple(dom)) for o in outs]
    tail = []
    for k, r in enumerate(results):
        if r not in em.memo.values():  # a literal
            r = f"tl.full([BLOCK], {r}, tl.float32)"
        tail.append(f"tl.store(out{k} + offs, {r}, mask=mask)")
    reads = tuple(em.reads)
    params = [f"p{n}" for n in reads] + [f"out{k}" for k in range(len(outs))] + ["BLOCK: tl.constexpr"]
    body = head + em.lines + tail
    src = "@triton.jit\ndef {}({}):\n{}\n".format(name, ", ".join(params), "\n".join("    " + ln for ln in body))
    grid = cdiv(total, block)
    ops = sorted({program.nodes[n].op for n in plan.groups[gi].nodes})
    return GroupKernel(name, src, reads, tuple(outs), grid, (("BLOCK", block),), tile.num_warps,
                       resources(name, block, tile.num_warps, grid, 1, warp_size=warp_size),
                       f"element-wise {'/'.join(ops)} over {list(physical)} in physical (channels-last) order, its "
                       f"outputs stored so: BLOCK={block}, num_warps={tile.num_warps}, {grid} programs")


def _transpose(plan: FusionPlan, gi: int, tiling: Tiling | None, name: str, warp_size: int,
               domain: tuple[int, ...], c: int, q: int,
               stored: dict[int, tuple[int, ...]] | None = None) -> GroupKernel:
    program = plan.program
    outs = plan.outputs_of(gi)
    layout = LayoutTile.read(tiling)
    tile, warps = layout.square(), layout.num_warps
    tile_c, tile_q = (min(tile, _pow2(traced.concrete(domain[k]))) for k in (c, q))  # tiling choices
    n_c, n_q = cdiv(domain[c], tile_c), cdiv(domain[q], tile_q)
    batch_dims = [k for k in range(len(domain)) if k not in (c, q)]
    batch = math.prod(domain[k] for k in batch_dims)
    grid = batch * n_q * n_c
    wide = any(math.prod(program.concrete_shape(j)) >= INT32_LIMIT for j in (*outs, *plan.inputs_of(gi)))
    # program -> (batch, q tile, c tile), c fastest: neighbouring programs write neighbouring output rows
    head = ["pid = tl.program_id(0).to(tl.int64)" if wide else "pid = tl.program_id(0)",
            f"tc = pid % {n_c}" if _several(n_c) else "tc = 0",
            f"tq = (pid // {n_c}) % {n_q}" if _several(n_q) else "tq = 0"]
    batch_shape = tuple(domain[k] for k in batch_dims)
    if batch > 1:  # a [1, 1] tensor, so that conditions on the batch index (a concat along it) combine with masks
        head.append(f"b = {'pid' if not _several(n_c * n_q) else f'pid // {n_c * n_q}'} + tl.zeros([1, 1], tl.int32)")
    for k, d, s in zip(batch_dims, batch_shape, contiguous_strides(batch_shape)):
        if d > 1:
            e = "b" if s == 1 else f"(b // {s})"
            head.append(f"i{k} = {e if k == batch_dims[0] else f'({e} % {d})'}")
    head += ["# load order: rows along the input's contiguous axis (q)",
             f"i{c} = tc * TILE_C + tl.arange(0, TILE_C)[:, None]",
             f"i{q} = tq * TILE_Q + tl.arange(0, TILE_Q)[None, :]",
             f"mask = (i{c} < {domain[c]}) & (i{q} < {domain[q]})"]
    dom = tuple(f"i{k}" if domain[k] > 1 else "0" for k in range(len(domain)))
    em = _Tile(plan, gi, domain, dom, stored)
    results = [em.value(o, dom) for o in outs]
    strides = contiguous_strides(domain)
    base = [f"i{k} * {strides[k]}" for k in batch_dims if domain[k] > 1]
    tail = ["# store order: rows along the output's contiguous axis (c); tl.trans goes through shared memory",
            f"j{q} = tq * TILE_Q + tl.arange(0, TILE_Q)[:, None]",
            f"j{c} = tc * TILE_C + tl.arange(0, TILE_C)[None, :]",
            f"offs = {' + '.join([*base, f'j{q} * {strides[q]}', f'j{c}'])}",
            f"smask = (j{q} < {domain[q]}) & (j{c} < {domain[c]})"]
    for k, r in enumerate(results):
        if r not in em.memo.values():  # a literal: nothing to transpose
            r = f"tl.full([TILE_C, TILE_Q], {r}, tl.float32)"
        tail.append(f"tl.store(out{k} + offs, tl.trans({r}), mask=smask)")
    reads = tuple(em.reads)
    consts = (("TILE_C", tile_c), ("TILE_Q", tile_q))
    params = [f"p{n}" for n in reads] + [f"out{k}" for k in range(len(outs))] + [f"{k}: tl.constexpr" for k, _ in consts]
    body = head + em.lines + tail
    src = "@triton.jit\ndef {}({}):\n{}\n".format(name, ", ".join(params), "\n".join("    " + ln for ln in body))
    item = max(program.nodes[n].dtype.itemsize for n in (*reads, *outs))
    ops = sorted({program.nodes[n].op for n in plan.groups[gi].nodes})
    return GroupKernel(name, src, reads, tuple(outs), grid, consts, warps,
                       resources(name, tile_c * tile_q, warps, grid, 2, smem_bytes=tile_c * tile_q * item * len(outs),
                                 warp_size=warp_size),
                       f"tiled transpose {'/'.join(ops)} to {list(domain)} (output axis {q} is the input's contiguous "
                       f"one): [TILE_C, TILE_Q] = [{tile_c}, {tile_q}] tiles through shared memory, num_warps={warps}, "
                       f"{grid} programs")


COPY_TILE = 64
"""The square tile of :func:`transpose_copy` (64 x 64: 3.7-3.9 TB/s measured, see the module docstring)."""


def transpose_copy(name: str, rows: int, cols: int) -> tuple[str, tuple[int, int]]:
    """A jit function ``name(src, dst)`` writing ``dst[c, r] = src[r, c]`` for a row-major ``[rows, cols]``
    ``src`` (this module's tiled transpose for a buffer another kernel reads transposed: loads along
    ``src``'s rows, ``tl.trans`` through shared memory, stores along ``dst``'s rows), and its 2-D grid."""
    t = COPY_TILE
    wide = rows * cols >= INT32_LIMIT
    start = "tl.program_id({}).to(tl.int64)" if wide else "tl.program_id({})"
    src = f'''@triton.jit
def {name}(src, dst):
    # [{rows}, {cols}] -> [{cols}, {rows}], one {t} x {t} tile per program
    r = ({start.format(0)} * {t} + tl.arange(0, {t}))[:, None]
    c = ({start.format(1)} * {t} + tl.arange(0, {t}))[None, :]
    mask = (r < {rows}) & (c < {cols})
    x = tl.load(src + r * {cols} + c, mask=mask)
    tl.store(dst + tl.trans(c) * {rows} + tl.trans(r), tl.trans(x), mask=tl.trans(mask))
'''
    return src, (cdiv(rows, t), cdiv(cols, t))
