"""The attention pattern of a fusion group (the expanded ``sdpa``: q @ k^T, scale, masks, softmax, @ v).

``match`` walks the group backwards from its output and accepts exactly the pattern the ``sdpa``
expansion produces: views (reshape, expand_dims, squeeze) after ``p @ v``; the softmax over the last axis
and ``p @ v`` as the recognisers ``SOFTMAX_PV`` and ``SOFTMAX_EXP`` of ``extract/recognisers.py`` write it
(``div(exp(x - max(x)), sum(exp(x - max(x)))) @ v``, or ``exp(x) / sum(exp(x))``, equal by the rule
``softmax_drop_max_shift``); an optional ``causal_mask``; an optional additive mask; an optional
multiplication by a scalar constant; ``q @ k^T``. The operands q, k, v and the mask are HBM buffers
reached through views, transposes and slices only (a fused qkv projection's ``chunk``: a slice of one axis
becomes an offset into the buffer and that axis' stride times the step); their strides (0 where a view broadcasts, as for the
grouped-query heads that share one key/value head) become the kernel's pointer arithmetic, so nothing
is copied. Anything else raises ``NotLowerable`` and the group runs as torch code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from axon_eg.extract.fusion import FusionPlan
from axon_eg.extract.recognisers import recognise
from axon_eg.ir import ops as O
from axon_eg.ir.program import Program

from .base import NotLowerable, attr, contiguous_strides

ONLINE_RULES = ("exp_online_rescale", "div_row_through_matmul_A")
"""Stored rules (rules_discovered/data) that justify the online softmax: rescaling a partial sum of
``exp(x - m1)`` by ``exp(m1 - m2)`` gives the sum shifted by ``m2``; dividing ``p @ v`` by the row sum equals
dividing ``p`` first."""
UNSHIFTED_RULE = "softmax_drop_max_shift"  # exp(x) / sum(exp(x)) == the max-shifted softmax
LOG2E = math.log2(math.e)
_ORDER_VIEWS = O.flat_views()  # views that keep the row-major element order
_VIEWS = (*O.views(), "transpose")
_READS = (*_VIEWS, "slice")  # what an operand may pass through between its buffer and the kernel's loads
_TL_DTYPES = {"bf16": "tl.bfloat16", "fp16": "tl.float16", "fp32": "tl.float32"}


@dataclass(frozen=True)
class Operand:
    """An HBM buffer as one matrix per batch index: ``buffer[batch . strides + r * rows + c * cols]``."""

    node: int
    batch: tuple[int, ...]  # strides over the scores' batch dims (0: broadcast)
    rows: int
    cols: int
    offset: int = 0  # elements from the buffer's start to the matrix's first (a slice of a wider buffer)


@dataclass(frozen=True)
class Attention:
    """What ``match`` found: ``softmax(q @ k^T * scale + mask, causal) @ v`` over ``batch`` slices."""

    q: Operand  # [S, D]
    k: Operand  # [T, D] (rows: keys)
    v: Operand  # [T, Dv]
    mask: Operand | None  # additive [S, T]
    scale: float
    causal: tuple[int, float] | None  # (diagonal, fill) of causal_mask
    shifted: bool  # the softmax subtracts its row max (else: softmax_drop_max_shift)
    batch: tuple[int, ...]
    s: int
    t: int
    d: int
    dv: int
    dtype: str  # of q, k and v

    @property
    def heads(self) -> int:
        return math.prod(self.batch)

    @property
    def group(self) -> int:
        """Query heads per key/value head: batch dims that q indexes and k, v broadcast over."""
        return math.prod(n for n, qs, ks, vs in zip(self.batch, self.q.batch, self.k.batch, self.v.batch)
                         if n > 1 and qs != 0 and ks == 0 and vs == 0)


class _Matcher:
    def __init__(self, program: Program, nodes: tuple[int, ...]):
        self.program = program
        self.inside = set(nodes)
        self.seen: set[int] = set()

    def node(self, n: int, op: str, role: str):
        node = self.program.nodes[n]
        if n not in self.inside or node.op != op:
            where = "inside" if n in self.inside else "outside"
            raise NotLowerable(f"attention {role}: expected {op}, found {node.op} (node {n}, {where} the group)")
        self.seen.add(n)
        return node

    def is_op(self, n: int, op: str) -> bool:
        return n in self.inside and self.program.nodes[n].op == op

    def reaches_buffer(self, n: int) -> bool:
        while n in self.inside and self.program.nodes[n].op in _READS:
            n = self.program.nodes[n].inputs[0]
        return n not in self.inside and not self.program.nodes[n].is_constant

    def pieces(self, n: int, target: tuple[int, ...], role: str) -> tuple[int, list[Pieces], int]:
        """The buffer behind views and slices of ``n``, per dim of ``target`` (``n``'s shape broadcast by NumPy
        rules) its (size, stride) pieces, outermost first (a dim that a reshape merged from a broadcast and
        a strided one, grouped-query heads' ``repeat_interleave`` of k and v, keeps both), and the offset of
        the first element read (slices)."""
        chain = []
        while n in self.inside:
            node = self.program.nodes[n]
            if node.op not in _READS:
                raise NotLowerable(f"attention {role}: {node.op} (node {n}) computes it inside the group; only views, "
                                   "transposes and slices fold into the kernel's loads")
            self.seen.add(n)
            chain.append(n)
            n = node.inputs[0]
        if self.program.nodes[n].is_constant:
            raise NotLowerable(f"attention {role} is a constant (node {n})")
        shape = self.program.concrete_shape(n)
        dims: list[Pieces] = [[(d, st)] for d, st in zip(shape, contiguous_strides(shape))]
        offset = 0
        for c in reversed(chain):
            if self.program.nodes[c].op == "slice":
                shape, dims, skip = self._slice(c, shape, dims, role)
                offset += skip
            else:
                shape, dims = self._view(c, shape, dims)
        pad = len(target) - len(shape)
        if pad < 0 or any(a not in (1, b) for a, b in zip(shape, target[pad:])):
            raise NotLowerable(f"attention {role}: {list(shape)} does not broadcast to {list(target)}")
        full = [[(b, 0)] for b in target[:pad]] + [[(b, 0)] if a == 1 and b != 1 else p
                                                    for a, b, p in zip(shape, target[pad:], dims)]
        return n, full, offset

    def _slice(self, c: int, shape: tuple[int, ...], dims: list[Pieces], role: str
               ) -> tuple[tuple[int, ...], list[Pieces], int]:
        """A slice of one axis: that axis' stride times the step, and the start's offset in elements."""
        axis = int(attr(self.program, c, "axis"))
        start, step = int(attr(self.program, c, "start")), int(attr(self.program, c, "step"))
        merged = _merged(dims[axis])
        if len(merged) > 1 or step < 1:
            raise NotLowerable(f"attention {role}: slice (node {c}) of an axis that is not one stride ({merged})")
        stride = merged[0][1] if merged else 0
        new = self.program.concrete_shape(c)
        return new, dims[:axis] + [[(new[axis], stride * step)]] + dims[axis + 1:], start * stride

    def _view(self, c: int, shape: tuple[int, ...], dims: list[Pieces]) -> tuple[tuple[int, ...], list[Pieces]]:
        node = self.program.nodes[c]
        new = self.program.concrete_shape(c)
        if node.op == "transpose":
            dims = [dims[p] for p in attr(self.program, c, "perm")]
        elif node.op == "expand_dims":
            axis = int(attr(self.program, c, "axis"))
            dims = dims[:axis] + [[(1, 0)]] + dims[axis:]
        elif node.op == "squeeze":
            axes = set(attr(self.program, c, "axes"))
            dims = [p for i, p in enumerate(dims) if i not in axes]
        elif node.op == "broadcast_to":
            pad = len(new) - len(shape)
            dims = [[(b, 0)] for b in new[:pad]] + [[(b, 0)] if a == 1 and b != 1 else p
                                                    for a, b, p in zip(shape, new[pad:], dims)]
        else:  # reshape: the pieces of the old dims dealt out to the new ones, split where a new dim ends inside one
            dims = _reshape_pieces(c, [q for p in dims for q in p if q[0] != 1], new)
        if len(dims) != len(new):
            raise AssertionError(f"view {node.op} (node {c}): pieces {dims} for shape {new}")
        return new, dims


Pieces = list[tuple[int, int]]  # one dim as (size, stride) pieces, outermost first


def _reshape_pieces(c: int, flat: Pieces, new: tuple[int, ...]) -> list[Pieces]:
    out: list[Pieces] = []
    flat = list(flat)
    for size in new:
        dim: Pieces = []
        left = size
        while left > 1:
            if not flat:
                raise NotLowerable(f"reshape (node {c}) to {list(new)}: sizes do not match")
            n, st = flat.pop(0)
            if n <= left:
                if left % n:
                    raise NotLowerable(f"reshape (node {c}) to {list(new)} cuts a dim of {n} unevenly")
                dim.append((n, st))
                left //= n
            else:  # the new dim ends inside this piece: keep its outer part, leave the inner for the next dims
                if n % left:
                    raise NotLowerable(f"reshape (node {c}) to {list(new)} cuts a dim of {n} unevenly")
                dim.append((left, st * (n // left)))
                flat.insert(0, (n // left, st))
                left = 1
        out.append(dim or [(1, 0)])
    return out


def _merged(dim: Pieces) -> Pieces:
    """Adjacent pieces that address memory as one (outer stride = inner stride x inner size) merged."""
    out: Pieces = []
    for n, st in dim:
        if n == 1:
            continue
        if out and out[-1][1] == st * n:
            out[-1] = (out[-1][0] * n, st)
        else:
            out.append((n, st))
    return out


def _single(dim: Pieces, role: str, what: str) -> int:
    merged = _merged(dim)
    if len(merged) > 1:
        raise NotLowerable(f"attention {role}: its {what} axis is not one stride ({merged})")
    return merged[0][1] if merged else dim[-1][1]  # a size-1 axis keeps its own stride (its pointer stays a block)


def _refine(batch: tuple[int, ...], operands: list[list[Pieces]]) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """The batch dims split where any operand's pieces split them (the query heads that share one key/value
    head apart from the key/value heads), and each operand's stride over every split dim."""
    splits: list[list[int]] = []  # per batch dim: the inner extents where split dims begin, innermost first
    for i, size in enumerate(batch):
        bounds = {1, size}
        for dims in operands:
            inner = 1
            for n, _ in reversed(_merged(dims[i])):
                inner *= n
                bounds.add(inner)
        edges = sorted(bounds)
        if any(b % a for a, b in zip(edges, edges[1:])):
            raise NotLowerable(f"attention: a batch dim of {size} is split unevenly by its operands ({edges})")
        splits.append(edges)
    refined = tuple(b // a for edges in splits for a, b in reversed(list(zip(edges, edges[1:]))))
    strides = []
    for dims in operands:
        out: list[int] = []
        for i, edges in enumerate(splits):
            spans, lo = [], 1  # (lo, size, stride) of each piece, innermost first
            for n, st in reversed(_merged(dims[i])):
                spans.append((lo, n, st))
                lo *= n
            for a in reversed(edges[:-1]):  # outermost split dim first, as ``refined`` lists them
                out.append(next((st * (a // lo) for lo, n, st in spans if lo <= a < lo * n), 0))
        strides.append(tuple(out))
    return refined or tuple(batch), strides


def match(plan: FusionPlan, gi: int) -> Attention:
    """The attention in group ``gi``, or NotLowerable naming the first node that deviates."""
    program = plan.program
    nodes = plan.groups[gi].nodes
    if any(program.nodes[n].dtype.name == "fp64" for n in nodes):
        raise NotLowerable("float64 values stay in torch")
    outs = plan.outputs_of(gi)
    if len(outs) != 1:
        raise NotLowerable(f"the group writes {len(outs)} tensors (nodes {outs}); the kernel stores only p @ v")
    m = _Matcher(program, nodes)
    n = outs[0]
    while n in m.inside and program.nodes[n].op in _ORDER_VIEWS:  # views of p @ v: the same row-major memory
        m.seen.add(n)
        n = program.nodes[n].inputs[0]
    pv_id = n
    if n in m.inside and program.nodes[n].kind is not O.OpKind.CONTRACTION:
        raise NotLowerable(f"epilogue {program.nodes[n].op} (node {n}) after p @ v: the kernel stores p @ v (views only)")
    # softmax over the last axis, then @ v (extract/recognisers.py)
    core = recognise("softmax_pv", program, pv_id, inside=m.inside)
    if not core:
        raise NotLowerable(f"attention softmax(scores) @ v: {core.why}")
    found = recognise("softmax_exp", program, core.nodes["e"], inside=m.inside, given=core)
    if not found:
        raise NotLowerable(f"attention softmax numerator: {found.why}")
    v_in, x = found.nodes["v"], found.nodes["s"]
    shifted = "max_axes" in found.attrs
    last = (len(program.concrete_shape(x)) - 1,)
    for axes in ("sum_axes", "max_axes"):
        if axes in found.attrs and tuple(found.attrs[axes]) != last:
            raise NotLowerable(f"attention softmax: its {axes.split('_')[0]} reduces axes {list(found.attrs[axes])}, "
                               f"not the last one")
    m.seen |= found.matched
    # scores = causal_mask(q @ k^T * scale + mask)
    causal = None
    if m.is_op(x, "causal_mask"):
        m.seen.add(x)
        causal = (int(attr(program, x, "diagonal")), float(attr(program, x, "fill")))
        x = program.nodes[x].inputs[0]
    scores = program.concrete_shape(x)
    mask_in = None
    if m.is_op(x, "add"):
        a, b = m.node(x, "add", "mask").inputs
        side = [j for j in (a, b) if m.reaches_buffer(j)]
        if len(side) != 1:
            raise NotLowerable(f"add (node {x}) is not scores + an additive mask buffer")
        mask_in = side[0]
        x = b if side[0] == a else a
    scale = 1.0
    if m.is_op(x, "mul"):
        a, b = m.node(x, "mul", "scale").inputs
        const = [j for j in (a, b) if program.nodes[j].is_constant and math.prod(program.concrete_shape(j)) == 1]
        if not const:
            raise NotLowerable(f"mul (node {x}) does not scale the scores by a scalar constant")
        scale = float(program.nodes[const[0]].attrs["value"])
        x = b if const[0] == a else a
    q_in, kt_in = m.node(x, "matmul", "scores q @ k^T").inputs
    if len(scores) < 2 or program.concrete_shape(x) != scores:
        raise NotLowerable(f"scores of shape {list(program.concrete_shape(x))} are broadcast by the mask to {list(scores)}")
    *batch, s, t = scores
    d = program.concrete_shape(q_in)[-1]
    dv = program.concrete_shape(v_in)[-1]
    if program.concrete_shape(pv_id) != (*batch, s, dv):
        raise NotLowerable(f"v broadcasts p @ v to {list(program.concrete_shape(pv_id))} beyond the scores {list(scores)}")
    found = [(role, *m.pieces(j, (*batch, a, b), role)) for role, j, a, b in (
        ("q", q_in, s, d), ("k^T", kt_in, d, t), ("v", v_in, t, dv), ("mask", mask_in, s, t)) if j is not None]
    refined, strides = _refine(tuple(batch), [dims[:-2] for _, _, dims, _ in found])
    q, kt, v, *masks = (Operand(node, st, _single(dims[-2], role, "row"), _single(dims[-1], role, "column"), skip)
                        for (role, node, dims, skip), st in zip(found, strides))
    mask = masks[0] if masks else None
    batch = list(refined)
    if m.seen != m.inside:
        extra = sorted(m.inside - m.seen)
        raise NotLowerable(f"nodes {extra} ({', '.join(program.nodes[i].op for i in extra)}) are not part of the "
                           "attention pattern")
    dtypes = {program.nodes[o.node].dtype.name for o in (q, kt, v)}
    if len(dtypes) != 1 or not dtypes <= set(_TL_DTYPES):
        raise NotLowerable(f"q, k, v dtypes {sorted(dtypes)}: the kernel needs one of {sorted(_TL_DTYPES)} for all three")
    k = Operand(kt.node, kt.batch, kt.cols, kt.rows, kt.offset)
    return Attention(q, k, v, mask, scale, causal, shifted, tuple(batch), s, t, d, dv, dtypes.pop())
