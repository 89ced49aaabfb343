"""Row-reduction groups (norms, softmax, log-softmax, logsumexp, row sums with their producers and
consumers) as one Triton kernel: ``ROWS`` rows per program, the row in ``BLOCK_N`` chunks, fp32
accumulation.

Every value of the group has a layout relative to the rows being reduced (the anchor reduction's
input, flattened to ``R x N``): ``full`` (one element per row and column, a ``[ROWS, BLOCK_N]``
block), ``row`` (one per row: a reduction's result, a ``[ROWS, 1]`` block), ``col`` (one per column,
e.g. the gamma of a norm: ``[1, BLOCK_N]``) or ``scalar``. When the row fits one chunk
(``BLOCK_N >= N``) the kernel is one pass and every value stays in registers; otherwise each
reduction gets its own loop over the chunks (recomputing its element-wise producers from HBM) and a
final loop stores the full-width outputs. Anything else (a reduction over another axis, a transpose
inside the group, a broadcast the layouts cannot express) raises ``NotLowerable``.
"""

from __future__ import annotations

import math

from axon_eg.extract.fusion import FusionPlan
from axon_eg.extract.tiling import Tiling
from axon_eg.ir import ops as O

from .base import GroupKernel, NotLowerable, attr, resources
from .ops import ELEMENTWISE, REDUCTIONS, lit

FULL, ROW, COL, SCALAR = "full", "row", "col", "scalar"
_RANK = {SCALAR: 0, ROW: 1, COL: 1, FULL: 2}
_VIEWS = ("reshape", "expand_dims", "squeeze", "broadcast_to")


def _join(a: str, b: str) -> str:
    if a == b or _RANK[b] == 0:
        return a
    if _RANK[a] == 0:
        return b
    return FULL


class _Rows:
    def __init__(self, plan: FusionPlan, gi: int, block_n: int):
        self.program = plan.program
        self.inside = set(plan.groups[gi].nodes)
        reductions = [n for n in plan.groups[gi].nodes if O.get(self.program.nodes[n].op).kind is O.OpKind.REDUCE]
        if not reductions:
            raise NotLowerable("no reduction in the group")
        self.domain = self.program.concrete_shape(self.program.nodes[reductions[0]].inputs[0])
        if not self.domain:
            raise NotLowerable("reduction of a scalar")
        self.n = self.domain[-1]
        self.r = max(1, math.prod(self.domain[:-1]))
        self.looped = block_n < self.n
        self.layout: dict[int, str] = {}
        for i in sorted(self.inside):
            self.layout[i] = self._infer(i)
        self.top: list[str] = []  # straight-line code of the program
        self.body: list[str] | None = None  # the loop being generated (multi-pass only)
        self.memo_top: dict[int, str] = {}
        self.memo_loop: dict[int, str] = {}
        self.reads: list[int] = []
        self.loops = 0

    # -- layouts ------------------------------------------------------------------------------
    def classify(self, shape: tuple[int, ...]) -> str | None:
        """Layout of a value of ``shape`` broadcast (NumPy, right-aligned) against the rows."""
        rank = len(self.domain)
        if len(shape) > rank:
            if any(d != 1 for d in shape[: len(shape) - rank]):
                return None
            shape = shape[len(shape) - rank:]
        padded = (1,) * (rank - len(shape)) + tuple(shape)
        if math.prod(padded) == 1:
            return SCALAR
        if padded == self.domain:
            return FULL
        if padded[-1] == 1 and padded[:-1] == self.domain[:-1]:
            return ROW
        if all(d == 1 for d in padded[:-1]) and padded[-1] == self.n:
            return COL
        return None

    def own(self, j: int) -> str | None:
        if j in self.layout:
            return self.layout[j]
        return self.classify(self.program.concrete_shape(j))

    def _infer(self, i: int) -> str:
        node = self.program.nodes[i]
        shape = self.program.concrete_shape(i)
        op = O.get(node.op)
        if op.kind is O.OpKind.REDUCE:
            axes = tuple(attr(self.program, i, "axes"))
            src = self.program.concrete_shape(node.inputs[0])
            if axes != (len(src) - 1,) or self.own(node.inputs[0]) != FULL or node.op not in (*REDUCTIONS, "logsumexp"):
                raise NotLowerable(f"{node.op} over axes {list(axes)} of {list(src)} is not a row reduction")
            return ROW
        flat_row = shape == self.domain[:-1]
        if node.op in ELEMENTWISE:
            want = self.classify(shape)
            if want is None and flat_row:
                want = ROW
            if want is None:
                raise NotLowerable(f"{node.op} of shape {list(shape)} does not fit the rows {list(self.domain)}")
            out = SCALAR
            for j in node.inputs:
                have = self.own(j)
                use = self.classify(self.program.concrete_shape(j)) if not flat_row else have
                if have is None or (use != have and not (have == ROW and use == SCALAR and self.r == 1)):
                    raise NotLowerable(f"{node.op}: operand of shape {list(self.program.concrete_shape(j))} "
                                       "broadcasts in a way the row layout cannot express")
                out = _join(out, have)
            return out if out != SCALAR else want
        if node.op in _VIEWS:
            have = self.own(node.inputs[0])
            want = self.classify(shape) or (ROW if flat_row else None)
            if have is None or want is None:
                raise NotLowerable(f"{node.op} to {list(shape)} leaves the row layout")
            if node.op == "broadcast_to":
                if _join(want, have) != want:
                    raise NotLowerable("broadcast_to narrows a layout")
                return want
            if want != have and not (ROW in (want, have) and SCALAR in (want, have) and self.r == 1):
                raise NotLowerable(f"{node.op} to {list(shape)} changes the layout {have} -> {want}")
            return have
        raise NotLowerable(f"{node.op} has no row-reduction lowering")

    # -- code ---------------------------------------------------------------------------------
    def emit(self, line: str, layout: str) -> None:
        (self.body if self.looped and layout in (FULL, COL) else self.top).append(line)

    def value(self, i: int) -> str:
        node = self.program.nodes[i]
        if node.op == "constant":
            return lit(node.attrs["value"])
        layout = self.own(i)
        local = self.looped and layout in (FULL, COL)
        memo = self.memo_loop if local else self.memo_top
        if i in memo:
            return memo[i]
        if local and self.body is None:
            raise AssertionError("a full-width value outside a chunk loop")
        if i not in self.inside:
            if i not in self.reads:
                self.reads.append(i)
            expr = {
                FULL: f"tl.load(p{i} + rows * {self.n} + cols, mask=mask, other=1.0)",
                ROW: f"tl.load(p{i} + rows, mask=rmask, other=1.0)",
                COL: f"tl.load(p{i} + cols, mask=cmask, other=1.0)",
                SCALAR: f"tl.load(p{i})",
            }[layout] + ".to(tl.float32)"
        elif node.op in ELEMENTWISE:
            expr = ELEMENTWISE[node.op]([self.value(j) for j in node.inputs], node.attrs)
        elif node.op in _VIEWS:
            src = self.value(node.inputs[0])
            if node.op == "broadcast_to" and layout != self.own(node.inputs[0]):
                shape = {FULL: "[ROWS, BLOCK_N]", ROW: "[ROWS, 1]", COL: "[1, BLOCK_N]"}[layout]
                expr = f"{src} + tl.zeros({shape}, tl.float32)"
            else:
                expr = src
        else:
            expr = self._reduce(i)
        name = f"v{i}"
        self.emit(f"{name} = {expr}", layout)
        memo[i] = name
        return name

    def _reduce(self, i: int) -> str:
        node = self.program.nodes[i]
        x = node.inputs[0]
        if node.op == "logsumexp":
            m = self._reduction(x, "max", f"m{i}")
            s = self._reduction(x, "sum", f"s{i}", shift=m)
            return f"{m} + tl.log({s})"
        acc = self._reduction(x, node.op, f"acc{i}")
        return f"{acc} * {1.0 / self.n!r}" if node.op == "mean" else acc

    def _reduction(self, x: int, op: str, acc: str, shift: str | None = None) -> str:
        fill, fn = REDUCTIONS[op]
        if not self.looped:
            v = self.value(x)
            term = f"tl.exp({v} - {shift})" if shift else v
            self.top.append(f"{acc} = {fn}(tl.where(mask, {term}, {fill}), axis=1)[:, None]")
            return acc
        saved = (self.body, self.memo_loop)
        self.body, self.memo_loop = [], {}
        v = self.value(x)
        term = f"tl.exp({v} - {shift})" if shift else v
        combine = {"tl.sum": f"{acc} + ", "tl.max": f"tl.maximum({acc}, ", "tl.min": f"tl.minimum({acc}, "}[fn]
        part = f"{fn}(tl.where(mask, {term}, {fill}), axis=1)[:, None]"
        self.body.append(f"{acc} = {combine}{part}" + (")" if fn != "tl.sum" else ""))
        self.top.append(f"{acc} = tl.full([ROWS, 1], {fill}, tl.float32)")
        self.top += self._loop(self.body)
        self.body, self.memo_loop = saved
        return acc

    def _loop(self, body: list[str]) -> list[str]:
        self.loops += 1
        head = [f"for c0 in range(0, {self.n}, BLOCK_N):", "    cols = c0 + tl.arange(0, BLOCK_N)[None, :]",
                f"    cmask = cols < {self.n}", "    mask = rmask & cmask"]
        return head + ["    " + ln for ln in body]


def lower(plan: FusionPlan, gi: int, tiling: Tiling | None, name: str, warp_size: int = 32,
          isa: str | None = None) -> GroupKernel:
    program = plan.program
    if any(program.nodes[n].dtype.name == "fp64" for n in plan.groups[gi].nodes):
        raise NotLowerable("float64 values stay in torch")
    t = dict(tiling.values) if tiling is not None else {}
    anchor_src = None
    for n in plan.groups[gi].nodes:
        if O.get(program.nodes[n].op).kind is O.OpKind.REDUCE:
            anchor_src = program.concrete_shape(program.nodes[n].inputs[0])
            break
    n_cols = anchor_src[-1] if anchor_src else 1
    block_n = int(t.get("BLOCK_N", 1 << max(4, math.ceil(math.log2(max(1, n_cols))))))
    rows_pp = int(t.get("ROWS_PER_PROGRAM", 1))
    warps = int(t.get("num_warps", 4))
    em = _Rows(plan, gi, block_n)
    outs = plan.outputs_of(gi)
    for o in outs:
        if em.layout[o] not in (FULL, ROW):
            raise NotLowerable(f"output {o} has layout {em.layout[o]}")
    head = ["pid = tl.program_id(0)", "rows = pid * ROWS + tl.arange(0, ROWS)[:, None]", f"rmask = rows < {em.r}"]
    if not em.looped:
        head += ["cols = tl.arange(0, BLOCK_N)[None, :]", f"cmask = cols < {em.n}", "mask = rmask & cmask"]
    stores: list[str] = []
    full_outs = [(k, o) for k, o in enumerate(outs) if em.layout[o] == FULL]
    for k, o in enumerate(outs):
        if em.layout[o] == ROW:
            stores.append(f"tl.store(out{k} + rows, {em.value(o)}, mask=rmask)")
    if full_outs and em.looped:
        em.body, em.memo_loop = [], {}
        for k, o in full_outs:
            em.body.append(f"tl.store(out{k} + rows * {em.n} + cols, {em.value(o)}, mask=mask)")
        stores += em._loop(em.body)
        em.body = None
    else:
        for k, o in full_outs:
            stores.append(f"tl.store(out{k} + rows * {em.n} + cols, {em.value(o)}, mask=mask)")
    reads = tuple(em.reads)
    params = [f"p{n}" for n in reads] + [f"out{k}" for k in range(len(outs))]
    body = head + em.top + stores
    src = "@triton.jit\ndef {}({}, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):\n{}\n".format(
        name, ", ".join(params), "\n".join("    " + ln for ln in body))
    grid = math.ceil(em.r / rows_pp)
    ops = sorted({program.nodes[n].op for n in plan.groups[gi].nodes})
    passes = f"{em.loops} chunk loops" if em.looped else "one pass"
    live = max(2, len(reads) + len(outs))
    return GroupKernel(name, src, reads, tuple(outs), grid, (("ROWS", rows_pp), ("BLOCK_N", block_n)), warps,
                       resources(name, rows_pp * block_n, warps, grid, live, smem_bytes=rows_pp * warps * 4,
                                 warp_size=warp_size),
                       f"row reduction {'/'.join(ops)} over {em.r} rows x {em.n}: ROWS={rows_pp}, BLOCK_N={block_n}, "
                       f"num_warps={warps}, {passes}, {grid} programs")
