"""Matmul groups (``a[..., M, K] @ b[..., K, N]`` with the prologues and epilogues fused around it) as one
Triton kernel shaped like the Triton matmul tutorial: a 1-D grid over (batch, tile row, tile column)
swizzled by ``GROUP_SIZE_M``, a K loop feeding ``tl.dot`` (fp32 accumulator; 16-bit operands straight
to the tensor cores, fp32 operands with ``input_precision="ieee"``), then the epilogue on the fp32 tile
and masked stores. For a GEMV (``isa="fma_reduce"``, N < 16) each output column is a row reduction of
the streamed A tile times a slice of B on CUDA cores, with no padding to tl.dot's 16 columns.

Values are computed at index tuples of tokens, as in the element-wise lowering: ``rm`` [BLOCK_M, 1] and
``rn`` [1, BLOCK_N] (the output tile), ``rk`` [1, BLOCK_K] and ``rkb`` [BLOCK_K, 1] (the K chunk as the
left and the right operand see it), ``b0, b1, ...`` (scalar batch indices). A transpose permutes the
tuple and broadcasting zeroes size-1 dims, so transposed and batch-broadcast operands are indexed in
place, never materialized.

Row statistics in the left operand's prologue (rmsnorm, layernorm, softmax) reduce over K. The operand
is written as a sum of terms ``coef[m] * base[m, k]`` whose coefficients depend only on the statistics
and whose bases only on what the K loop can compute. Since ``(r * x) @ W = r * (x @ W)``, each base with
rows gets a ``tl.dot`` accumulator, a base without rows (a gamma, a bias, a constant) a column sum of
``base * W`` (a short CUDA-core pass over B after the loop), the statistics accumulate in the K loop and
the coefficients scale the accumulators after it (rmsnorm: one pass). A statistic needed inside the loop
gets a pre-pass over K first: under a non-linear op (softmax's max under exp), or where deferring it
would cancel (``x - mean`` as ``x @ W - mean * colsum(W)``, ``E[x^2] - mean^2``; layernorm pre-passes its
mean). A reduction across N in the epilogue gives each program whole rows: one tile when
``BLOCK_N >= N``, else a loop over N tiles, each with its own K loop.

Longer than ~450 lines on purpose: the kernel body (grid, K loop, accumulators, epilogue, stores) is built
in one pass whose steps share the index analysis; the operand terms, the reduction terms, TMA and the
GEMV/split-K kernels already live in ``matmul_operands``, ``matmul_terms``, ``tma`` and ``gemv_splitk``.
"""

from __future__ import annotations

import math
import re

from axon_eg.backends.triton import isa as isa_names
from axon_eg.backends.triton.isa import DOT_PERSISTENT, DOT_TMA
from axon_eg.extract.fusion import FusionPlan
from axon_eg.extract.templates import DOT_MIN, Tiling
from axon_eg.ir import ops as O
from axon_eg.ir import traced

from . import gemv_splitk, tma
from .base import INT32_LIMIT, GroupKernel, NotLowerable, attr, cdiv, contiguous_strides, resources, unflat
from .cost import right_k_major
from .elementwise import sliced
from .layout import transpose_copy
from .matmul_operands import _Operands
from .matmul_terms import _TILE, _VIEWS, ONE, Index, _Ctx, _mul, _NeedPrepass, _sum, _tokens, _tree_tokens
from .templates import TEMPLATES, MatmulTile, SplitKTile
from .tl_expressions import ELEMENTWISE, lit


class _Kernel(_Operands):
    def __init__(self, plan: FusionPlan, gi: int, blocks: tuple[int, int, int], fma: bool, pre: frozenset[int]):
        p = self.program = plan.program
        self.inside = set(plan.groups[gi].nodes)
        self.mm = plan.groups[gi].anchor(p)
        _one_matmul(plan, gi)
        self.a, self.b = p.nodes[self.mm].inputs
        out = p.concrete_shape(self.mm)
        self.batch, (self.M, self.N), self.K = out[:-2], out[-2:], p.concrete_shape(self.a)[-1]
        self.bm, self.bn, self.bk = blocks
        self.fma = fma
        self.precision = "ieee"  # tl.dot's input_precision for fp32 operands (``isa.dot_precision``; set by ``lower``)
        self.btok = tuple(f"b{j}" if d != 1 else "0" for j, d in enumerate(self.batch))
        self.dom_out: Index = (*self.btok, "rm", "rn")
        self.dom_a = self._operand_index(self.a, ("rm", "rk"))
        self.dom_b = self._operand_index(self.b, ("rkb", "rn"))
        self.anc_a, self.desc = self._ancestors(self.a), self._descendants()
        self.looped = self.bn < self.N and any(self._is_reduce(n) for n in self.desc)
        reduce_a = {n for n in self.anc_a if self._is_reduce(n)}
        self.pre = set(pre) | (reduce_a if self.looped else set())  # looped: K statistics once, before the N loop
        dts = {p.nodes[j].dtype.name for j in (self.a, self.b)}
        self.dot_dtype = dts.pop() if len(dts) == 1 and dts <= {"bf16", "fp16"} else "fp32"
        self.wide = _wide(plan, gi)
        tail = {"rm": (self.M, self.bm), "rn": (self.N, self.bn), "rk": (self.K, self.bk), "rkb": (self.K, self.bk)}
        self.need = {t: traced.partial(*sb) for t, sb in tail.items()}
        btoks = frozenset(t for t in self.btok if t != "0")
        self.main = _Ctx("t", btoks | {"rm", "rn", "rk", "rkb"}, True)
        self.tile = _Ctx("e", btoks | {"rm", "rn"}, False)
        self.after = _Ctx("f", btoks | {"rm"}, False) if self.looped else self.tile
        self.pres: dict[int, _Ctx] = {}
        self.pre_init: dict[int, list[str]] = {}
        self.pre_fin: dict[int, list[str]] = {}
        self.main_init: list[str] = []
        self.cols: _Ctx | None = None  # the column-sum pass over B, when a term has no rows
        self.cols_init: list[str] = []
        self.cols_fin: list[str] = []
        self.row_init: list[str] = []  # accumulators of reductions across N (looped)
        self.cache: dict = {}
        self.toks: dict[str, frozenset[str]] = {}
        self.names = {"pid", "pid_b", "pid_m", "pid_n", "k0", "n0", "mmask", "nmask", "kmask", "kmask_b", *_TILE,
                      *(t for t in self.btok if t != "0")}
        self.reads: list[int] = []
        self.known: dict[int, bool] = {}
        self.accs = {"dot": 0, "colsum": 0, "rowsum": 0}

    # -- structure ----------------------------------------------------------------------------
    def _operand_index(self, n: int, tail: Index) -> Index:
        shape = self.program.concrete_shape(n)
        lead = shape[:-2]
        btok = self.btok[len(self.btok) - len(lead):] if lead else ()
        return (*("0" if d == 1 else t for d, t in zip(lead, btok)), *tail)

    def _is_reduce(self, n: int) -> bool:
        return O.get(self.program.nodes[n].op).kind is O.OpKind.REDUCE

    def _ancestors(self, n: int) -> set[int]:
        out, stack = set(), [n]
        while stack:
            j = stack.pop()
            if j in self.inside and j not in out:
                out.add(j)
                stack.extend(self.program.nodes[j].inputs)
        return out

    def _descendants(self) -> set[int]:
        out = {self.mm}
        for n in sorted(self.inside):
            if any(j in out for j in self.program.nodes[n].inputs):
                out.add(n)
        return out - {self.mm}

    def loop_known(self, n: int) -> bool:
        """Whether the K loop can compute ``n``: it depends on no K statistic that is still deferred."""
        if n not in self.known:
            node = self.program.nodes[n]
            self.known[n] = n not in self.inside or (n in self.pre if self._is_reduce(n)
                                                     else all(self.loop_known(j) for j in node.inputs))
        return self.known[n]

    def deferred_in(self, n: int) -> set[int]:
        return {j for j in self._ancestors(n) if self._is_reduce(j) and j not in self.pre}

    # -- indexing -----------------------------------------------------------------------------
    def flat(self, idx: Index, shape: tuple[int, ...]) -> str:
        terms = [i if s == 1 else f"{i} * {s}" for i, s, d in zip(idx, contiguous_strides(shape), shape)
                 if d != 1 and i != "0"]
        return " + ".join(terms) or "0"

    @staticmethod
    def bcast(idx: Index, shape: tuple[int, ...], arg: tuple[int, ...]) -> Index:
        """Index of an operand of shape ``arg`` broadcast to ``shape`` (a size-1 dim that is broadcast reads
        element 0; one that is not keeps its token, so the tile keeps its shape)."""
        n = len(arg)
        tail, out = (idx[len(idx) - n:], shape[len(shape) - n:]) if n else ((), ())
        return tuple("0" if a == 1 and o != 1 else i for i, a, o in zip(tail, arg, out))

    @staticmethod
    def view(idx: Index, shape: tuple[int, ...], to: tuple[int, ...]) -> Index:
        """Index into ``to`` of the element at ``idx`` of ``shape`` (a flat view: the same row-major order). Views
        that add or drop size-1 dims keep each index; one that regroups leading dims (a 3-D or 4-D tensor's
        ``[B, M, K]`` seen as ``[B * M, K]`` by a matmul) keeps the trailing dims both have and decomposes the
        rest from their flat index, so a tile's row index ``rm`` becomes ``(rm // M, rm % M)``: per row, never
        per element."""
        if math.prod(to) == 1:
            return ("0",) * len(to)
        if len(idx) != len(shape):  # an index that is not this value's (a caller's bug): refuse, never misindex
            raise NotLowerable(f"view of {list(shape)} indexed at {list(idx)}")
        if [d for d in shape if d != 1] != [d for d in to if d != 1]:
            if math.prod(shape) != math.prod(to):
                raise NotLowerable(f"reshape {list(to)} <-> {list(shape)} changes the element count")
            k = 0  # trailing dims both shapes have: their indices carry over
            while k < min(len(shape), len(to)) and shape[len(shape) - 1 - k] == to[len(to) - 1 - k]:
                k += 1
            head, rest = shape[:len(shape) - k], to[:len(to) - k]
            terms = [i if st == 1 else f"{i} * {st}" for i, st, d in
                     zip(idx[:len(head)], contiguous_strides(head), head) if d != 1 and i != "0"]
            flat = " + ".join(terms) or "0"
            lead = unflat(flat, rest) if flat != "0" else ("0",) * len(rest)
            return (*lead, *idx[len(head):])
        kept = iter([i for i, d in zip(idx, shape) if d != 1])
        return tuple(next(kept) if d != 1 else "0" for d in to)

    def mask(self, toks: frozenset[str]) -> str | None:
        """The masks a tile over ``toks`` needs (none along a dim its block size divides)."""
        names = {"rm": "mmask", "rn": "nmask", "rk": "kmask", "rkb": "kmask_b"}
        used = [names[t] for t in _TILE if t in toks and self.need[t]]
        return " & ".join(used) or None

    def name(self, base: str, toks: frozenset[str]) -> str:
        nm, k = base, 1
        while nm in self.names:
            nm, k = f"{base}_{k}", k + 1
        self.names.add(nm)
        self.toks[nm] = toks
        return nm

    def t(self, expr: str) -> frozenset[str]:
        return self.toks.get(expr, frozenset())

    # -- values -------------------------------------------------------------------------------
    def value(self, n: int, idx: Index, ctx: _Ctx) -> str:
        node = self.program.nodes[n]
        if node.is_constant:
            return lit(node.attrs["value"])
        key = (n, idx)
        if key in ctx.memo:
            return ctx.memo[key]
        missing = _tokens(idx) - ctx.tokens
        if missing:
            raise NotLowerable(f"{node.op} (node {n}) is needed where {sorted(missing)} is not defined "
                               "(a full-width value after a reduction across N needs BLOCK_N >= N)")
        shape = self.program.concrete_shape(n)
        ins = [self.program.concrete_shape(j) for j in node.inputs]
        if n not in self.inside:
            expr, toks = self._load(n, idx, shape, "1.0")
            expr += ".to(tl.float32)"
        elif n == self.mm:
            if ctx is not self.tile or idx != self.dom_out:
                raise NotLowerable(f"the matmul result is used at index {idx}, not its own tile")
            return self.result
        elif self._is_reduce(n):
            ctx.memo[key] = self._reduction(n, idx, ctx)
            return ctx.memo[key]
        elif node.op in ELEMENTWISE:
            args = [self.value(j, self.bcast(idx, shape, s), ctx) for j, s in zip(node.inputs, ins)]
            expr, toks = ELEMENTWISE[node.op](args, node.attrs), frozenset().union(*(self.t(a) for a in args))
        else:
            ctx.memo[key] = self.value(node.inputs[0], self.index_map(n, idx), ctx)
            return ctx.memo[key]
        nm = self.name(f"{ctx.tag}{n}", toks)
        ctx.lines.append(f"{nm} = {expr}")
        ctx.memo[key] = nm
        return nm

    def index_map(self, n: int, idx: Index) -> Index:
        """The index of a layout node's operand (broadcast, transpose, size-1 views, slice)."""
        node = self.program.nodes[n]
        shape, src = self.program.concrete_shape(n), self.program.concrete_shape(node.inputs[0])
        if node.op == "broadcast_to":
            return self.bcast(idx, shape, src)
        if node.op == "transpose":
            j = [""] * len(idx)
            for k, q in enumerate(attr(self.program, n, "perm")):
                j[q] = idx[k]
            return tuple(j)
        if node.op in _VIEWS:
            return self.view(idx, shape, src)
        if node.op == "slice" and n not in self.desc:  # in an epilogue the tile masks would not match
            axis, start, step = (int(attr(self.program, n, k)) for k in ("axis", "start", "step"))
            j = list(idx)
            j[axis] = sliced(idx[axis], start, step)
            return tuple(j)
        raise NotLowerable(f"{node.op} (node {n}) has no Triton lowering inside a matmul group")

    def _load(self, n: int, idx: Index, shape: tuple[int, ...], other: str) -> tuple[str, frozenset[str]]:
        if n not in self.reads:
            self.reads.append(n)
        addr = self.flat(idx, shape)
        toks = _tokens(addr) & set(_TILE)
        if not toks:  # one element for the whole tile: a scalar load
            return f"tl.load(p{n}{'' if addr == '0' else ' + ' + addr})", toks
        m = self.mask(toks)
        return f"tl.load(p{n} + {addr}{f', mask={m}, other={other}' if m else ''})", toks

    # -- reductions ---------------------------------------------------------------------------
    def natural(self) -> dict[int, Index]:
        """Each node's index at its own position in the tile: operand prologues from the operands'
        indices, the epilogue forward from the matmul's."""
        p = self.program
        nat: dict[int, Index] = {}

        def down(n: int, idx: Index) -> None:
            if n not in self.inside or n in nat or n == self.mm:
                return
            nat[n] = idx
            node = p.nodes[n]
            try:
                if self._is_reduce(n):
                    base = idx[:-1] if attr(p, n, "keepdims") else idx
                    down(node.inputs[0], (*base, "rk"))
                elif node.op in ELEMENTWISE:
                    for j in node.inputs:
                        down(j, self.bcast(idx, p.concrete_shape(n), p.concrete_shape(j)))
                else:
                    down(node.inputs[0], self.index_map(n, idx))
            except NotLowerable:
                pass

        down(self.a, self.dom_a)
        down(self.b, self.dom_b)
        nat[self.mm] = self.dom_out
        for n in sorted(self.desc):
            node, shape = p.nodes[n], p.concrete_shape(n)
            if any(j in self.desc and j not in nat for j in node.inputs):
                continue  # fed by an epilogue value without a place in the tile (a slice, a concat): neither is n
            src = nat.get(node.inputs[0], ())
            if self._is_reduce(n):
                self._row_reduction(n)
                nat[n] = (*src[:-1], "0") if attr(p, n, "keepdims") else src[:-1]
            elif node.op == "transpose":
                nat[n] = tuple(src[q] for q in attr(p, n, "perm"))
            elif node.op in _VIEWS:
                nat[n] = self.view(src, p.concrete_shape(node.inputs[0]), shape)
            elif node.op in ELEMENTWISE or node.op == "broadcast_to":
                nat[n] = self._forward(n, nat)
        return nat

    def _forward(self, n: int, nat: dict[int, Index]) -> Index:
        shape, out = self.program.concrete_shape(n), self.program.concrete_shape(self.mm)
        ins = [(nat[j], self.program.concrete_shape(j)) for j in self.program.nodes[n].inputs if j in nat]
        idx = []
        for pos in range(len(shape), 0, -1):  # right-aligned
            got = {i[-pos] for i, s in ins if len(s) >= pos and s[-pos] != 1}
            if not got and shape[-pos] == 1:  # a size-1 dim the operands share: keep their token
                got = ({i[-pos] for i, s in ins if len(s) >= pos} - {"0"}) or {"0"}
            if len(got) > 1:
                raise NotLowerable(f"node {n} combines the tile's axes crosswise: {sorted(got)}")
            if got:
                idx.append(got.pop())
            elif pos <= len(out) and out[-pos] == shape[-pos]:
                idx.append(self.dom_out[-pos])
            else:
                raise NotLowerable(f"node {n} of shape {list(shape)} does not fit the output tile {list(out)}")
        return tuple(idx)

    def store(self, k: int, o: int, idx: Index) -> None:
        toks = _tokens(idx)
        if {"rk", "rkb"} & toks:  # a prologue value: stored once, from the K loop of the first tile column or row
            if not self.loop_known(o):
                raise NotLowerable(f"output {o} is a prologue value that depends on a row statistic")
            ctx = self.main
        else:
            ctx = self.tile if "rn" in toks or not self.looped else self.after
        v = self.value(o, idx, ctx)
        addr = self.flat(idx, self.program.concrete_shape(o))
        tile = [t for t in _TILE if t in toks]
        addr += "".join(f" + 0 * {t}" for t in tile if t not in _tokens(addr))  # size-1 dims: the tile's shape
        mask = self.mask(toks)
        once = [f"{b} == 0" for b in self.btok if b != "0" and b not in toks]  # one program stores what others share
        if "rm" not in toks and self.M > self.bm:
            once.append("pid_m == 0")
        if "rn" not in toks and self.N > self.bn and not (self.looped and ctx is self.after):
            once.append("n0 == 0" if self.looped else "pid_n == 0")
        line = f"tl.store(out{k} + {addr}, {v}{f', mask={mask}' if mask else ''})"
        ctx.lines += [f"if {' and '.join(once)}:", "    " + line] if once else [line]

    # -- assembly -----------------------------------------------------------------------------
    def build(self, outs: list[int]) -> tuple[list[str], int]:
        terms = self.lin(self.a, self.dom_a)
        parts = []
        for base, coef in terms.items():
            acc = self._colsum(base) if base == ONE or "rm" not in _tree_tokens(base) else self._dot(base)
            parts.append(_mul(coef, ("acc", acc)))
        expr, toks = self.render(_sum(parts), self.tile) if parts else ("0.0", frozenset())
        if len(parts) == 1 and parts[0][0] == "acc":
            self.result = expr
        else:
            self.result = self.name("mm", toks)
            self.tile.lines.append(f"{self.result} = {expr}")
        nat = self.natural()
        for k, o in enumerate(outs):
            if o not in nat:
                raise NotLowerable(f"output {o} ({self.program.nodes[o].op}) is neither a prologue nor an epilogue value")
            self.store(k, o, nat[o])
        return self._assemble()

    def _assemble(self) -> tuple[list[str], int]:
        tiles_m, tiles_n = cdiv(self.M, self.bm), cdiv(self.N, self.bn)
        per_batch = tiles_m * (1 if self.looped else tiles_n)
        i64 = ".to(tl.int64)" if self.wide else ""
        head = ["pid = tl.program_id(0)"]
        if any(t != "0" for t in self.btok):
            head += ["# batch entry, then the tile inside it", f"pid_b = pid // {per_batch}", f"pid = pid % {per_batch}"]
            for j, d in enumerate(self.batch):
                if d != 1:
                    stride = math.prod(self.batch[j + 1:])
                    e = f"pid_b // {stride}" if stride != 1 else "pid_b"
                    head.append(f"b{j} = ({e}{f' % {d}' if j else ''}){i64}")
        if self.looped:
            head += ["pid_m = pid  # whole rows per program: the N tiles are a loop below"]
        elif traced.known(tiles_n, 1) or traced.known(tiles_m, 1):
            head += ["pid_m = pid", "pid_n = 0"] if tiles_n == 1 else ["pid_m = 0", "pid_n = pid"]
        else:
            head += ["# GROUP_SIZE_M swizzle: consecutive programs walk down GROUP_SIZE_M tile rows of one tile",
                     "# column, so the A rows and B columns they share are still in L2",
                     f"num_pid_in_group = GROUP_SIZE_M * {tiles_n}", "group_id = pid // num_pid_in_group",
                     "first_pid_m = group_id * GROUP_SIZE_M",
                     f"group_size_m = min({tiles_m} - first_pid_m, GROUP_SIZE_M)",
                     "pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)",
                     "pid_n = (pid % num_pid_in_group) // group_size_m"]
        head += [f"rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)){i64}[:, None]", f"mmask = rm < {self.M}"]
        rn = [f"rn = ({'n0' if self.looped else 'pid_n * BLOCK_N'} + tl.arange(0, BLOCK_N)){i64}[None, :]",
              f"nmask = rn < {self.N}"]
        body = head + ([] if self.looped else rn)
        kloop = [f"rk = (k0 + tl.arange(0, BLOCK_K)){i64}[None, :]", f"kmask = rk < {self.K}"]
        for level in sorted(self.pres):
            body += [f"# pre-pass {level} over K: row statistics the operand tile needs inside the main loop"]
            body += self.pre_init[level] + [f"for k0 in range(0, {self.K}, BLOCK_K):"]
            body += ["    " + ln for ln in kloop + self.pres[level].lines] + self.pre_fin[level]
        kloop += [f"rkb = (k0 + tl.arange(0, BLOCK_K)){i64}[:, None]", f"kmask_b = rkb < {self.K}"]
        tile = (rn if self.looped else []) + self.main_init
        tile += ["# K loop: Triton software-pipelines these loads num_stages deep through shared memory",
                 f"for k0 in range(0, {self.K}, BLOCK_K):"]
        tile += ["    " + ln for ln in kloop + self.main.lines]
        if self.cols is not None:
            tile += ["# column sums of the row-free terms, sum_k base[k] * B[k, n]: CUDA-core work off the tensor-core loop"]
            tile += self.cols_init + [f"for k0 in range(0, {self.K}, BLOCK_K):"]
            tile += ["    " + ln for ln in kloop[2:] + self.cols.lines] + self.cols_fin
        tile += ["# epilogue on the fp32 tile"] + self.tile.lines
        if self.looped:
            body += self.row_init + [f"for n0 in range(0, {self.N}, BLOCK_N):"] + ["    " + ln for ln in tile]
            body += self.after.lines
        else:
            body += tile
        grid = math.prod(self.batch) * per_batch
        return body, grid


def _wide(plan: FusionPlan, gi: int) -> bool:
    """Whether a tensor the group reads or writes needs 64-bit offsets (only then are they used)."""
    sizes = [math.prod(plan.program.concrete_shape(n)) for n in (*plan.inputs_of(gi), *plan.outputs_of(gi))]
    return any(s >= INT32_LIMIT for s in sizes)


_LAYOUT = ("broadcast_to", "transpose", "slice", *_VIEWS)
"""The ops ``_Operands._raw`` reads an operand through without computing."""


def _plain(plan: FusionPlan, gi: int, blocks: tuple[int, int, int], isa: str | None) -> bool:
    """True when the group is a plain matmul with an element-wise epilogue: nothing inside but the matmul,
    chains of layout ops (broadcasts, transposes, slices, size-1 views) feeding its operands, element-wise
    ops of the matmul's shape computed from the matmul, each other, constants and tensors from outside
    (directly or through element-wise and layout ops of those, views only adding or dropping size-1
    dims), and the outputs among the matmul and its epilogue. Then
    the kernel loads each operand through its chain (``_raw`` / ``value`` with ``index_map``, left operand
    first), every epilogue value sits at the output tile's own index (``natural``: ``_forward`` of operands
    all at that index), and each output is stored from the tile (``store``: the accumulator at its own
    index, other tensors at a broadcast of it), so the lowering cannot refuse. NotLowerable, with its
    reason, where it refuses before anything else could: a view that regroups dims (``_Kernel.view``, which
    depends on the shapes alone) in an operand chain or applied to the tile first in ``natural``'s order;
    for ``tl.dot+tma``, 64-bit indexing or no operand loaded as a dense 2-D tile (the only loads over K
    are the operands', at ``_raw``'s index: ``tma.dense``). False for every
    other group: only building the kernel tells."""
    p = plan.program
    group = plan.groups[gi]
    mm = group.anchor(p)
    inside = set(group.nodes)
    out = p.concrete_shape(mm)
    desc = {mm}
    for n in sorted(inside):  # ``_Kernel._descendants``
        if any(j in desc for j in p.nodes[n].inputs):
            desc.add(n)
    chains: list[int] = []
    for start in p.nodes[mm].inputs:
        n = start
        while n in inside and p.nodes[n].op in _LAYOUT:
            chains.append(n)
            n = p.nodes[n].inputs[0]
        if n in inside:  # an operand computed in the group (a prologue)
            return False
    side = inside - set(chains) - desc  # what the epilogue reads from outside tensors (a bias's broadcast)
    for n in sorted(side):
        node = p.nodes[n]
        if node.op not in (*_LAYOUT, *ELEMENTWISE) or any(j in inside and j not in side for j in node.inputs):
            return False
        if node.op in _VIEWS:
            shape = p.concrete_shape(n)
            try:
                _Kernel.view(("0",) * len(shape), shape, p.concrete_shape(node.inputs[0]))
            except NotLowerable:
                return False  # refused when the epilogue reads it: only the store order tells which first
    for n in chains:  # the order the kernel maps the operands' indices
        if p.nodes[n].op in _VIEWS:
            shape = p.concrete_shape(n)
            _Kernel.view(("0",) * len(shape), shape, p.concrete_shape(p.nodes[n].inputs[0]))
    epilogue = {mm}  # values at the output tile's own index
    for n in sorted(desc - {mm}):  # ``natural``'s forward pass
        node = p.nodes[n]
        if node.op in ELEMENTWISE and p.concrete_shape(n) == out and all(
                j in epilogue or j in side or j not in inside for j in node.inputs):
            epilogue.add(n)
        elif node.op in _VIEWS and node.inputs[0] in epilogue:
            # a view of a tile value: ``natural`` refuses it here when it regroups dims; else it moves the index
            _Kernel.view(("0",) * len(out), out, p.concrete_shape(n))
            return False
        else:
            return False
    if not set(plan.outputs_of(gi)) <= epilogue:
        return False
    if isa in (DOT_TMA, DOT_PERSISTENT):
        tma.coordinates_fit(_wide(plan, gi))
        kernel = _Kernel(plan, gi, blocks, False, frozenset())
        for x, idx in ((kernel.a, kernel.dom_a), (kernel.b, kernel.dom_b)):
            raw = kernel._raw(x, idx)  # None: computed from a constant, no load
            if raw is not None and tma.dense(raw[1], p.concrete_shape(raw[0]), p.nodes[raw[0]].dtype.itemsize):
                return True
        raise NotLowerable(tma.NO_DENSE_LOAD)
    return True


def _pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def _tile(plan: FusionPlan, gi: int, tiling: Tiling | None) -> MatmulTile | SplitKTile:
    """The group's tile (GEMV / split-K: the templates decide); NotLowerable for float64 or another kind's tiling."""
    program = plan.program
    if any(program.nodes[n].dtype.name == "fp64" for n in plan.groups[gi].nodes):
        raise NotLowerable("float64 values stay in torch")
    tile = TEMPLATES.tile_of(plan, gi, tiling) or TEMPLATES.template_for(plan, gi).of()  # GEMV / split-K: the templates decide
    if isinstance(tile, SplitKTile):
        return tile
    if not isinstance(tile, MatmulTile):
        raise NotLowerable(f"a {tile.kind} tiling on a matmul group")
    return tile


def _blocks(plan: FusionPlan, gi: int, tile: MatmulTile, isa: str | None) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K): fma_reduce narrows BLOCK_N to the GEMV's columns; tl.dot needs 16."""
    bm, bn, bk = tile.BLOCK_M, tile.BLOCK_N, tile.BLOCK_K
    if isa == "fma_reduce":  # the GEMV's few columns: no padding to tl.dot's 16
        bn = min(bn, _pow2(plan.program.concrete_shape(plan.groups[gi].anchor(plan.program))[-1]))
    elif min(bm, bn, bk) < DOT_MIN:
        raise NotLowerable(f"tl.dot needs tiles of at least {DOT_MIN} (BLOCK_M={bm}, BLOCK_N={bn}, BLOCK_K={bk})")
    return bm, bn, bk


def check(plan: FusionPlan, gi: int, tiling: Tiling | None, warp_size: int | None = None,
          isa: str | None = None) -> bool:
    """NotLowerable with :func:`lower`'s reason for what is decided without generating code (float64, the
    tiling's kind, tl.dot's minimum tile, one matmul per group; split-K GEMVs entirely; plain matmuls
    whose operands come through layout chains, ``_plain``); True when that decides it lowers (split-K, a
    plain matmul), False when only building the kernel tells (the prologue and epilogue index analysis of
    other groups, the TMA rewrite of its loads, a ``/3xtf32`` right operand's transposed copy). :func:`lower`
    calls it first."""
    split3 = isa_names.tf32x3(isa) and not right_k_major(plan, gi)  # the right operand needs a transposed copy
    isa = isa_names.base(isa)
    tile = _tile(plan, gi, tiling)
    if isinstance(tile, SplitKTile):
        return gemv_splitk.check(plan, gi, tile, warp_size)
    blocks = _blocks(plan, gi, tile, isa)
    _one_matmul(plan, gi)
    plain = _plain(plan, gi, blocks, isa)
    if tile.SPLIT_K > 1 and (not plain or isa not in (isa_names.DOT, DOT_TMA) or plan.program.concrete_shape(
            plan.groups[gi].anchor(plan.program))[:-2]):
        raise NotLowerable(f"split-K (SPLIT_K={tile.SPLIT_K}): only a 2-D matmul with layout prologues and an "
                           "element-wise epilogue, not persistent")
    if isa == DOT_PERSISTENT and not plain:
        # measured: with pre-passes, column sums or N loops inside the tile loop (flattened or not) the
        # persistent kernel returned wrong values on the H200 with Triton 3.6 (layernorm_matmul)
        raise NotLowerable("tl.dot+tma+persistent: only a matmul with layout prologues and an element-wise "
                           "epilogue (one K loop per tile)")
    if split3 and (isa == DOT_PERSISTENT or tile.SPLIT_K > 1):
        raise NotLowerable(_NO_COPY)
    return plain and not split3


def _constexprs(blocks: tuple[int, int, int], tile: MatmulTile, body: list[str]) -> list[tuple[str, int]]:
    """The block sizes (``_blocks``) a matmul kernel body takes as constexprs, and ``GROUP_SIZE_M`` where it
    swizzles."""
    consts = [("BLOCK_M", blocks[0]), ("BLOCK_N", blocks[1]), ("BLOCK_K", blocks[2])]
    if "GROUP_SIZE_M" in "\n".join(body):
        consts.append(("GROUP_SIZE_M", tile.GROUP_SIZE_M))
    return consts


def _jit(name: str, params: list[str], body: list[str]) -> str:
    return "@triton.jit\ndef {}({}):\n{}\n".format(name, ", ".join(params), "\n".join("    " + ln for ln in body))


def _one_matmul(plan: FusionPlan, gi: int) -> None:
    p = plan.program
    if p.nodes[plan.groups[gi].anchor(p)].kind is not O.OpKind.CONTRACTION or sum(p.nodes[n].kind is O.OpKind.CONTRACTION
                                                               for n in plan.groups[gi].nodes) != 1:
        raise NotLowerable("a matmul group needs exactly one matmul")


def lower(plan: FusionPlan, gi: int, tiling: Tiling | None, name: str, warp_size: int | None = None,
          isa: str | None = None) -> GroupKernel:
    program = plan.program
    check(plan, gi, tiling, warp_size, isa)
    precision, isa = isa_names.dot_precision(isa), isa_names.base(isa)
    tile = _tile(plan, gi, tiling)
    if isinstance(tile, SplitKTile):
        return gemv_splitk.lower(plan, gi, tile, name, warp_size)
    warps, stages = tile.num_warps, tile.num_stages
    bm, bn, bk = _blocks(plan, gi, tile, isa)
    fma = isa == "fma_reduce"
    outs = plan.outputs_of(gi)
    pre: frozenset[int] = frozenset()
    while True:
        kernel = _Kernel(plan, gi, (bm, bn, bk), fma, pre)
        kernel.precision = precision
        try:
            body, grid = kernel.build(outs)
            break
        except _NeedPrepass as exc:
            if exc.reductions <= pre or not exc.reductions:
                raise NotLowerable("a prologue statistic cannot be computed before the K loop") from None
            pre = pre | exc.reductions
    shapes = {n: tuple(program.concrete_shape(n)) for n in kernel.reads}
    copied = None
    if precision == "tf32x3":  # wgmma multiplies 32-bit operands only with K contiguous in shared memory
        body, copied = _right_k_contiguous(body, shapes, isa, tile)
        if copied is not None:
            shapes[copied] = shapes[copied][::-1]
    if isa in (DOT_TMA, DOT_PERSISTENT):
        body = tma.rewrite(body, shapes, {n: program.nodes[n].dtype.itemsize for n in kernel.reads}, kernel.looped,
                           kernel.wide)
    if copied is not None:
        return _with_right_copy(plan, gi, kernel, body, grid, tile, name, warp_size, copied, isa == DOT_TMA)
    if tile.SPLIT_K > 1:
        return _split_k(plan, gi, kernel, body, grid, tile, name, warp_size, tma_loads=isa == DOT_TMA)
    if isa == DOT_PERSISTENT:
        body = _persistent(body, grid, flatten=not kernel.looped)
    consts = _constexprs((bm, bn, bk), tile, body)
    reads = tuple(kernel.reads)
    params = [f"p{n}" for n in reads] + [f"out{k}" for k in range(len(outs))] + [f"{c}: tl.constexpr" for c, _ in consts]
    src = _jit(name, params, body)
    item = max(program.nodes[j].dtype.itemsize for j in (kernel.a, kernel.b))
    # the largest tile a thread block holds: the fp32 accumulator (GEMV: the streamed A tile)
    block = max(bm * bk, bm * bn) if fma else bm * bn
    live = max(2, kernel.accs["dot"] + 1)
    res = resources(name, block, warps, grid, live, smem_bytes=(bm * bk + bk * bn) * item * stages, warp_size=warp_size)
    what = "GEMV (fma_reduce)" if fma else f"tl.dot {kernel.dot_dtype}" + (
        ", TMA loads" if isa == DOT_TMA else ", TMA loads, persistent" if isa == DOT_PERSISTENT else "") \
        + (f" ({precision})" if precision != "ieee" and kernel.dot_dtype == "fp32" else "")
    extra = [f"{len(kernel.pres)} K pre-passes" if kernel.pres else "",
             f"{kernel.accs['colsum']} column sums" if kernel.accs["colsum"] else "",
             f"{kernel.accs['rowsum']} row sums" if kernel.accs["rowsum"] else "",
             "whole rows per program, N tiles in a loop" if kernel.looped else ""]
    batch = f"{list(kernel.batch)} x " if kernel.batch else ""
    ops = "/".join(sorted({program.nodes[n].op for n in plan.groups[gi].nodes} - {"matmul"}))
    swizzle = f"GROUP_SIZE_M={tile.GROUP_SIZE_M}, " if ("GROUP_SIZE_M", tile.GROUP_SIZE_M) in consts else ""
    note = (f"matmul {batch}{kernel.M}x{kernel.N}x{kernel.K} (MxNxK){' + ' + ops if ops else ''}, {what}: "
            f"BLOCK_M={bm}, BLOCK_N={bn}, BLOCK_K={bk}, {swizzle}num_warps={warps}, num_stages={stages}, "
            f"{grid} {'tiles' if isa == DOT_PERSISTENT else 'programs'}" + "".join(f", {e}" for e in extra if e))
    return GroupKernel(name, src, reads, tuple(outs), grid, tuple(consts), warps, res, note, (("num_stages", stages),),
                       persistent=isa == DOT_PERSISTENT)


_NO_COPY = ("3xtf32: the right operand has N contiguous and is not one whole 2-D buffer a transposed copy can "
            "serve (or the kernel is persistent / split-K)")
_N_MAJOR_RIGHT = re.compile(r"tl\.load\(p(\d+) \+ rkb \* (\d+) \+ rn(, mask=[^)]*)?\)")


def _right_k_contiguous(body: list[str], shapes: dict[int, tuple[int, ...]], isa: str | None,
                        tile: MatmulTile) -> tuple[list[str], int | None]:
    """``body`` reading its right operand with K contiguous: a whole 2-D buffer stored K x N (loads
    ``p + rkb * N + rn``) is read from a transposed copy (``p + rn * K + rkb``; the copy's buffer ``j`` is
    returned, None when the operand already has K contiguous; a masked load keeps its mask, which broadcasts
    to the same tile). NotLowerable when the right operand has N contiguous and is not such a buffer
    (batched, a broadcast), or the kernel is persistent or split-K (the copy is a launch of its own before
    the kernel's)."""
    found = {int(m[1]) for ln in body for m in _N_MAJOR_RIGHT.finditer(ln)
             if len(shapes.get(int(m[1]), ())) == 2 and shapes[int(m[1])][1] == int(m[2])}
    if not found and not any("rkb * " in ln and "+ rn" in ln for ln in body if "tl.load(" in ln):
        return body, None
    if len(found) != 1 or isa == DOT_PERSISTENT or tile.SPLIT_K > 1:
        raise NotLowerable(_NO_COPY)
    j = found.pop()
    k, n = shapes[j]
    swapped = [_N_MAJOR_RIGHT.sub(lambda m: f"tl.load(p{j} + rn * {k} + rkb{m[3] or ''})" if int(m[1]) == j else m[0], ln)
               for ln in body]
    use = re.compile(rf"\bp{j}\b")
    if any(use.search(ln) and f"tl.load(p{j} + rn * {k} + rkb" not in ln for ln in swapped):
        raise NotLowerable(f"3xtf32: buffer p{j} is read in another form too; a transposed copy cannot serve it")
    return swapped, j


def _with_right_copy(plan: FusionPlan, gi: int, kernel: _Kernel, body: list[str], grid: int, tile: MatmulTile,
                     name: str, warp_size: int | None, copied: int, tma_loads: bool) -> GroupKernel:
    """The kernel behind a host function that first writes the right operand ``copied`` (stored K x N)
    transposed, N x K (``layout.transpose_copy``), and passes the copy in its place."""
    program = plan.program
    bm, bn, bk = tile.BLOCK_M, tile.BLOCK_N, tile.BLOCK_K
    k, n = program.concrete_shape(copied)
    consts = _constexprs((bm, bn, bk), tile, body)
    reads, outs = tuple(kernel.reads), tuple(plan.outputs_of(gi))
    params = [f"p{j}" for j in reads] + [f"out{i}" for i in range(len(outs))]
    jit = _jit(f"{name}_mm", params + [f"{c}: tl.constexpr" for c, _ in consts], body)
    copy, (gr, gc) = transpose_copy(f"{name}_bt", k, n)
    args = ", ".join(f"t{copied}" if p == f"p{copied}" else p for p in params)
    kw = ", ".join(f"{c}={v}" for c, v in consts)
    host = f'''def {name}({", ".join(params)}, **launch):
    """The right operand p{copied} ({k} x {n}, N contiguous) copied transposed, then the matmul on the copy."""
    t{copied} = torch.empty(({n}, {k}), dtype=p{copied}.dtype, device=p{copied}.device)
    {name}_bt[({gr}, {gc})](p{copied}, t{copied}, num_warps=4)
    {name}_mm[({grid},)]({args}, {kw}, num_warps={tile.num_warps}, num_stages={tile.num_stages}, **launch)
'''
    item = max(program.nodes[j].dtype.itemsize for j in (kernel.a, kernel.b))
    res = resources(f"{name}_mm", bm * bn, tile.num_warps, grid, max(2, kernel.accs["dot"] + 1),
                    smem_bytes=(bm * bk + bk * bn) * item * tile.num_stages, warp_size=warp_size)
    ops = "/".join(sorted({program.nodes[j].op for j in plan.groups[gi].nodes} - {"matmul"}))
    note = (f"matmul {kernel.M}x{kernel.N}x{kernel.K} (MxNxK){' + ' + ops if ops else ''}, tl.dot {kernel.dot_dtype}"
            f"{', TMA loads' if tma_loads else ''} ({kernel.precision}) on a transposed copy of the right operand "
            f"(N x K, K contiguous): BLOCK_M={bm}, BLOCK_N={bn}, BLOCK_K={bk}, num_warps={tile.num_warps}, "
            f"num_stages={tile.num_stages}, {grid} programs")
    return GroupKernel(name, copy + "\n\n" + jit + "\n\n" + host, reads, outs, grid, tuple(consts), tile.num_warps,
                       res, note, host=True)


def _split_k(plan: FusionPlan, gi: int, kernel: _Kernel, body: list[str], tiles: int, tile: MatmulTile, name: str,
             warp_size: int | None, tma_loads: bool = False) -> GroupKernel:
    """The plain kernel as two launches: ``{name}_part`` runs K slice ``split`` of every output tile
    (``tiles * SPLIT_K`` programs) and stores its fp32 accumulator to ``part[split]``; ``{name}_finish``
    adds the ``SPLIT_K`` partials of its tile in slice order (deterministic) and runs the group's epilogue
    and stores, unchanged. The host function allocates ``part`` and launches both."""
    program = plan.program
    split, (m, n, k) = tile.SPLIT_K, (kernel.M, kernel.N, kernel.K)
    bm, bn, bk = tile.BLOCK_M, tile.BLOCK_N, tile.BLOCK_K
    loop = next(i for i, ln in enumerate(body) if ln.startswith("for k0 in range(0, "))
    end = next((i for i in range(loop + 1, len(body)) if not body[i].startswith("    ")), len(body))
    head, kloop, epilogue = body[:loop], body[loop:end], body[end:]
    if "pid = tl.program_id(0)" not in head or not any(ln.startswith("acc0 = tl.zeros(") for ln in head):
        raise NotLowerable("split-K: the kernel has no single accumulator")
    chunk = math.ceil(math.ceil(k / bk) / split) * bk  # K per slice, whole K tiles
    offs = f"rm * {n} + rn"
    mask = " & ".join(c for c, need in (("mmask", traced.partial(m, bm)), ("nmask", traced.partial(n, bn))) if need)
    at = head.index("pid = tl.program_id(0)")
    part_head = head[:at] + [f"pid = tl.program_id(0) % {tiles}  # the output tile",
                             f"split = tl.program_id(0) // {tiles}  # its K slice"] + head[at + 1:]
    part_body = (part_head + [f"# K slice split: [{chunk} * split, {chunk} * (split + 1)) of {k}",
                              f"for k0 in range(split * {chunk}, tl.minimum(split * {chunk} + {chunk}, {k}), BLOCK_K):"]
                 + kloop[1:] + [f"tl.store(part + split * {m * n} + {offs}, acc0" + (f", mask={mask})" if mask else ")")])
    load = f"tl.load(part + s * {m * n} + {offs}" + (f", mask={mask}, other=0.0)" if mask else ")")
    finish_body = head + [f"# the {split} K slices' partials, added in slice order (deterministic)",
                          f"for s in range({split}):", f"    acc0 += {load}"] + epilogue
    reads, outs = tuple(kernel.reads), tuple(plan.outputs_of(gi))
    consts = _constexprs((bm, bn, bk), tile, body)
    params = ([f"p{j}" for j in reads] + [f"out{i}" for i in range(len(outs))] + ["part"]
              + [f"{c}: tl.constexpr" for c, _ in consts])

    args = ", ".join([f"p{j}" for j in reads] + [f"out{i}" for i in range(len(outs))] + ["part"])
    kw = ", ".join(f"{c}={v}" for c, v in consts)
    host = f'''def {name}({", ".join([f"p{j}" for j in reads] + [f"out{i}" for i in range(len(outs))])}, **launch):
    """Both launches of the group; ``launch``: vendor launch knobs (Intel XPU grf_mode, warp_size)."""
    part = torch.empty(({split}, {m}, {n}), dtype=torch.float32, device=out0.device)
    {name}_part[({tiles * split},)]({args}, {kw}, num_warps={tile.num_warps}, num_stages={tile.num_stages}, **launch)
    {name}_finish[({tiles},)]({args}, {kw}, num_warps={tile.num_warps}, **launch)
'''
    src = _jit(f"{name}_part", params, part_body) + "\n\n" + _jit(f"{name}_finish", params, finish_body) + "\n\n" + host
    item = max(program.nodes[j].dtype.itemsize for j in (kernel.a, kernel.b))
    res = resources(f"{name}_part", bm * bn, tile.num_warps, tiles * split, max(2, kernel.accs["dot"] + 1),
                    smem_bytes=(bm * bk + bk * bn) * item * tile.num_stages, warp_size=warp_size)
    ops = "/".join(sorted({program.nodes[j].op for j in plan.groups[gi].nodes} - {"matmul"}))
    prec = f" ({kernel.precision})" if kernel.precision != "ieee" and kernel.dot_dtype == "fp32" else ""
    note = (f"matmul {m}x{n}x{k} (MxNxK){' + ' + ops if ops else ''}, tl.dot {kernel.dot_dtype}"
            f"{', TMA loads' if tma_loads else ''}{prec}, "
            f"split-K: SPLIT_K={split} "
            f"slices of {chunk}, BLOCK_M={bm}, BLOCK_N={bn}, BLOCK_K={bk}, num_warps={tile.num_warps}, "
            f"num_stages={tile.num_stages}, {tiles * split} programs, then {tiles} add the fp32 partials in order "
            "and run the epilogue")
    return GroupKernel(name, src, reads, outs, tiles * split, tuple(consts), tile.num_warps, res, note, host=True)


def _persistent(body: list[str], tiles: int, flatten: bool) -> list[str]:
    """The kernel body as a persistent loop: each program takes the tiles ``pid``, ``pid + programs``, ...
    (``tl.num_programs``: the emitter launches one program per resident slot), the tensor descriptors made
    once before the loop. ``flatten`` lets Triton pipeline the K loops of consecutive tiles as one loop (as
    in Triton's persistent matmul tutorial); not with an N loop inside."""
    head = [ln for ln in body if "tl.make_tensor_descriptor(" in ln or ln.startswith("# tensor descriptors")]
    rest = [ln for ln in body if ln not in head]
    if "pid = tl.program_id(0)" not in rest:
        raise AssertionError("a matmul body starts from its program id")
    loop = (f"for tile in tl.range(tl.program_id(0), {tiles}, tl.num_programs(0)"
            + (", flatten=True" if flatten else "") + "):")
    return head + ["# persistent: one program per resident slot walks the output tiles", loop] + [
        "    " + ("pid = tile" if ln == "pid = tl.program_id(0)" else ln) if ln else ln for ln in rest]
