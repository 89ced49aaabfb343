"""The attention pattern of a fusion group (the expanded ``sdpa``: q @ k^T, scale, masks, softmax, @ v).

``match`` walks the group backwards from its output and accepts exactly the pattern the ``sdpa``
expansion produces, node by node: views (reshape, expand_dims, squeeze) after ``p @ v``; the softmax
``div(exp(x - max(x)), sum(exp(x - max(x))))`` over the last axis (or ``exp(x) / sum(exp(x))``, equal by
the rule ``softmax_drop_max_shift``); an optional ``causal_mask``; an optional additive mask; an optional
multiplication by a scalar constant; ``q @ k^T``. The operands q, k, v and the mask are HBM buffers
reached through views and transposes only; their strides (0 where a view broadcasts, as for the
grouped-query heads that share one key/value head) become the kernel's pointer arithmetic, so nothing
is copied. Anything else raises ``NotLowerable`` and the group runs as torch code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from axon_eg.extract.fusion import FusionPlan
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
_TL_DTYPES = {"bf16": "tl.bfloat16", "fp16": "tl.float16", "fp32": "tl.float32"}


@dataclass(frozen=True)
class Operand:
    """An HBM buffer as one matrix per batch index: ``buffer[batch . strides + r * rows + c * cols]``."""

    node: int
    batch: tuple[int, ...]  # strides over the scores' batch dims (0: broadcast)
    rows: int
    cols: int


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

    def row_reduction(self, n: int, op: str, of: int, role: str) -> None:
        node = self.node(n, op, role)
        rank = len(self.program.concrete_shape(of))
        if node.inputs[0] != of or tuple(attr(self.program, n, "axes")) != (rank - 1,) or not node.attrs["keepdims"]:
            raise NotLowerable(f"attention {role}: {op} (node {n}) is not a keepdims reduction of node {of}'s last axis")

    def reaches_buffer(self, n: int) -> bool:
        while n in self.inside and self.program.nodes[n].op in _VIEWS:
            n = self.program.nodes[n].inputs[0]
        return n not in self.inside and self.program.nodes[n].op != "constant"

    def operand(self, n: int, target: tuple[int, ...], role: str) -> Operand:
        """The buffer behind views of ``n``, as strides of ``n`` broadcast to ``target`` (NumPy rules)."""
        chain = []
        while n in self.inside:
            node = self.program.nodes[n]
            if node.op not in _VIEWS:
                raise NotLowerable(f"attention {role}: {node.op} (node {n}) computes it inside the group; only views "
                                   "and transposes fold into the kernel's loads")
            self.seen.add(n)
            chain.append(n)
            n = node.inputs[0]
        if self.program.nodes[n].op == "constant":
            raise NotLowerable(f"attention {role} is a constant (node {n})")
        shape = self.program.concrete_shape(n)
        strides = list(contiguous_strides(shape))
        for c in reversed(chain):
            shape, strides = self._view(c, shape, strides)
        pad = len(target) - len(shape)
        if pad < 0 or any(a not in (1, b) for a, b in zip(shape, target[pad:])):
            raise NotLowerable(f"attention {role}: {list(shape)} does not broadcast to {list(target)}")
        full = [0] * pad + [0 if a == 1 and b != 1 else s for a, b, s in zip(shape, target[pad:], strides)]
        return Operand(n, tuple(full[:-2]), full[-2], full[-1])

    def _view(self, c: int, shape: tuple[int, ...], strides: list[int]) -> tuple[tuple[int, ...], list[int]]:
        node = self.program.nodes[c]
        new = self.program.concrete_shape(c)
        if node.op == "transpose":
            strides = [strides[p] for p in attr(self.program, c, "perm")]
        elif node.op == "expand_dims":
            strides = strides[:int(attr(self.program, c, "axis"))] + [0] + strides[int(attr(self.program, c, "axis")):]
        elif node.op == "squeeze":
            axes = set(attr(self.program, c, "axes"))
            strides = [s for i, s in enumerate(strides) if i not in axes]
        elif node.op == "broadcast_to":
            pad = len(new) - len(shape)
            strides = [0] * pad + [0 if a == 1 and b != 1 else s for a, b, s in zip(shape, new[pad:], strides)]
        else:  # reshape: only of a dense row-major layout (size-1 dims aside)
            dense = contiguous_strides(shape)
            if any(n != 1 and s != want for n, s, want in zip(shape, strides, dense)):
                raise NotLowerable(f"reshape (node {c}) of a transposed or broadcast view")
            strides = list(contiguous_strides(new))
        if len(strides) != len(new):
            raise AssertionError(f"view {node.op} (node {c}): strides {strides} for shape {new}")
        return new, strides


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
    if n in m.inside and program.nodes[n].op != "matmul":
        raise NotLowerable(f"epilogue {program.nodes[n].op} (node {n}) after p @ v: the kernel stores p @ v (views only)")
    probs, v_in = m.node(pv_id, "matmul", "output p @ v").inputs
    # softmax over the last axis
    e, total = m.node(probs, "div", "softmax normalization").inputs
    m.row_reduction(total, "sum", e, "softmax sum")
    x = m.node(e, "exp", "softmax exp").inputs[0]
    shifted = m.is_op(x, "sub") and m.is_op(program.nodes[x].inputs[1], "max")
    if shifted:
        x, mx = m.node(x, "sub", "softmax shift").inputs
        m.row_reduction(mx, "max", x, "softmax max")
    # scores = causal_mask(q @ k^T * scale + mask)
    causal = None
    if m.is_op(x, "causal_mask"):
        m.seen.add(x)
        causal = (int(attr(program, x, "diagonal")), float(attr(program, x, "fill")))
        x = program.nodes[x].inputs[0]
    scores = program.concrete_shape(x)
    mask = None
    if m.is_op(x, "add"):
        a, b = m.node(x, "add", "mask").inputs
        side = [j for j in (a, b) if m.reaches_buffer(j)]
        if len(side) != 1:
            raise NotLowerable(f"add (node {x}) is not scores + an additive mask buffer")
        mask = m.operand(side[0], scores, "mask")
        x = b if side[0] == a else a
    scale = 1.0
    if m.is_op(x, "mul"):
        a, b = m.node(x, "mul", "scale").inputs
        const = [j for j in (a, b) if program.nodes[j].op == "constant" and math.prod(program.concrete_shape(j)) == 1]
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
    q = m.operand(q_in, (*batch, s, d), "q")
    kt = m.operand(kt_in, (*batch, d, t), "k^T")
    v = m.operand(v_in, (*batch, t, dv), "v")
    if m.seen != m.inside:
        extra = sorted(m.inside - m.seen)
        raise NotLowerable(f"nodes {extra} ({', '.join(program.nodes[i].op for i in extra)}) are not part of the "
                           "attention pattern")
    dtypes = {program.nodes[o.node].dtype.name for o in (q, kt, v)}
    if len(dtypes) != 1 or not dtypes <= set(_TL_DTYPES):
        raise NotLowerable(f"q, k, v dtypes {sorted(dtypes)}: the kernel needs one of {sorted(_TL_DTYPES)} for all three")
    k = Operand(kt.node, kt.batch, kt.cols, kt.rows)
    return Attention(q, k, v, mask, scale, causal, shifted, tuple(batch), s, t, d, dv, dtypes.pop())
