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
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from axon_eg.extract.cost import GROUP_SIZE_M
from axon_eg.extract.fusion import FusionPlan
from axon_eg.extract.tiling import Tiling
from axon_eg.ir import ops as O
from axon_eg.ir.program import Node

from . import gemv_splitk, tma
from .base import GroupKernel, NotLowerable, attr, contiguous_strides, resources
from .ops import ELEMENTWISE, lit

Index = tuple[str, ...]
Tree = tuple  # ("one",) ("c", float) ("v", node, index) ("acc", name) ("add"|"mul"|"div", a, b) ("neg", a)
ONE: Tree = ("one",)
_TOKEN = re.compile(r"\b(rkb|rk|rm|rn|b\d+)\b")
_TILE = ("rm", "rn", "rk", "rkb")
_SHAPE = {"rm": "BLOCK_M", "rn": "BLOCK_N", "rk": "BLOCK_K", "rkb": "BLOCK_K"}
_VIEWS = ("reshape", "expand_dims", "squeeze")
_FILL = {"sum": "0.0", "mean": "0.0", "max": 'float("-inf")', "min": 'float("inf")'}
_FN = {"sum": "tl.sum", "mean": "tl.sum", "max": "tl.max", "min": "tl.min"}
_TL = {"bf16": "tl.bfloat16", "fp16": "tl.float16", "fp32": "tl.float32"}


def _tokens(idx: Index | str) -> frozenset[str]:
    return frozenset(t for s in ((idx,) if isinstance(idx, str) else idx) for t in _TOKEN.findall(s))


def _combine(op: str, acc: str, part: str) -> str:
    return {"max": f"tl.maximum({acc}, {part})", "min": f"tl.minimum({acc}, {part})"}.get(op, f"{acc} + {part}")


# -- terms: the left operand as sum(coef * base) ---------------------------------------------------
def _add(a: Tree, b: Tree) -> Tree:
    if a[0] == b[0] == "c":
        return ("c", a[1] + b[1])
    return _mul(("c", 2.0), a) if a == b else ("add", a, b)


def _mul(a: Tree, b: Tree) -> Tree:
    if a == ONE or b == ONE:
        return b if a == ONE else a
    if a[0] == b[0] == "c":
        return ("c", a[1] * b[1])
    if a[0] == "neg" or b[0] == "neg":
        return _mul(a[1], b[1]) if a[0] == b[0] else _neg(_mul(a[1] if a[0] == "neg" else a, b[1] if b[0] == "neg" else b))
    return ("mul", *sorted((a, b), key=repr))  # canonical, so x*y and y*x share an accumulator


def _neg(a: Tree) -> Tree:
    return ("c", -1.0) if a == ONE else ("c", -a[1]) if a[0] == "c" else a[1] if a[0] == "neg" else ("neg", a)


def _sum(terms: list[Tree]) -> Tree:
    out = terms[0]
    for t in terms[1:]:
        out = _add(out, t)
    return out


Lin = dict  # base tree -> coefficient tree


def _lin_add(a: Lin, b: Lin, negate: bool = False) -> Lin:
    out = dict(a)
    for base, c in b.items():
        c = _neg(c) if negate else c
        out[base] = _add(out[base], c) if base in out else c
    return out


def _lin_mul(a: Lin, b: Lin) -> Lin:
    out: Lin = {}
    for ba, ca in a.items():
        for bb, cb in b.items():
            base, c = _mul(ba, bb), _mul(ca, cb)
            out[base] = _add(out[base], c) if base in out else c
    return out


def _subst(t: Tree, old: str, new: str) -> Tree:
    if t[0] == "v":
        return ("v", t[1], tuple(re.sub(rf"\b{old}\b", new, s) for s in t[2]))
    return (t[0], *(_subst(x, old, new) if isinstance(x, tuple) else x for x in t[1:]))


def _leaves(t: Tree) -> list[Tree]:
    if t[0] == "v":
        return [t]
    return [leaf for x in t[1:] if isinstance(x, tuple) for leaf in _leaves(x)]


def _tree_tokens(t: Tree) -> frozenset[str]:
    if t[0] == "v":
        return _tokens(t[2])
    return frozenset().union(*(_tree_tokens(x) for x in t[1:] if isinstance(x, tuple)))


class _NeedPrepass(Exception):
    """These K statistics are needed inside the K loop: compute them in a pre-pass and start again."""

    def __init__(self, reductions: set[int]):
        super().__init__(sorted(reductions))
        self.reductions = frozenset(reductions)


@dataclass
class _Ctx:
    tag: str  # variable prefix
    tokens: frozenset[str]  # index tokens defined where its lines run
    loop: bool  # inside a K loop: deferred statistics are not known yet
    lines: list[str] = field(default_factory=list)
    memo: dict = field(default_factory=dict)


class _Kernel:
    def __init__(self, plan: FusionPlan, gi: int, blocks: tuple[int, int, int], fma: bool, pre: frozenset[int]):
        p = self.program = plan.program
        self.inside = set(plan.groups[gi].nodes)
        self.mm = plan.groups[gi].anchor(p)
        if p.nodes[self.mm].op != "matmul" or sum(p.nodes[n].op == "matmul" for n in self.inside) != 1:
            raise NotLowerable("a matmul group needs exactly one matmul")
        self.a, self.b = p.nodes[self.mm].inputs
        out = p.concrete_shape(self.mm)
        self.batch, (self.M, self.N), self.K = out[:-2], out[-2:], p.concrete_shape(self.a)[-1]
        self.bm, self.bn, self.bk = blocks
        self.fma = fma
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
        sizes = [math.prod(p.concrete_shape(n)) for n in (*plan.inputs_of(gi), *plan.outputs_of(gi))]
        self.wide = max(sizes, default=0) >= 2**31  # 64-bit offsets only when a tensor needs them
        self.need = {"rm": self.M % self.bm != 0, "rn": self.N % self.bn != 0, "rk": self.K % self.bk != 0,
                     "rkb": self.K % self.bk != 0}
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
        """Index into ``to`` of the element at ``idx`` of ``shape``, for views that add or drop size-1 dims."""
        if math.prod(to) == 1:
            return ("0",) * len(to)
        if [d for d in shape if d != 1] != [d for d in to if d != 1]:
            raise NotLowerable(f"reshape {list(to)} <-> {list(shape)} regroups dims; only size-1 dims may change")
        it = iter(i for i, d in zip(idx, shape) if d != 1)
        return tuple(next(it) if d != 1 else "0" for d in to)

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
        if node.op == "constant":
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
            j[axis] = f"({idx[axis]} * {step} + {start})" if step != 1 else f"({idx[axis]} + {start})"
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
    def _reduction(self, r: int, idx: Index, ctx: _Ctx) -> str:
        node, src = self._row_reduction(r)
        tok, size = ("rn", self.N) if r in self.desc else ("rk", self.K) if r in self.anc_a else (None, 0)
        if tok is None or src[-1] != size:
            raise NotLowerable(f"{node.op} (node {r}) reduces neither the left operand's K nor the output's N")
        base = idx[:-1] if attr(self.program, r, "keepdims") else idx
        if tok in _tokens(base):
            raise NotLowerable(f"{node.op} (node {r}) reduces an axis the tile also spans")
        in_idx = (*base, tok)
        if tok == "rn":
            return self._across_n(r, in_idx, ctx)
        if r in self.pre:
            return self._prepass(r, in_idx)
        if ctx.loop:
            raise _NeedPrepass({r})
        total = self._deferred(r, in_idx)
        if total[0] == "acc":
            return total[1]
        expr, toks = self.render(total, ctx)
        nm = self.name(f"{ctx.tag}{r}", toks)
        ctx.lines.append(f"{nm} = {expr}")
        return nm

    def _row_reduction(self, r: int) -> tuple[Node, tuple[int, ...]]:
        node = self.program.nodes[r]
        src = self.program.concrete_shape(node.inputs[0])
        axes = tuple(attr(self.program, r, "axes"))
        if node.op not in _FILL or axes != (len(src) - 1,):
            raise NotLowerable(f"{node.op} over axes {list(axes)} of {list(src)}: only sum/mean/max/min over the "
                               "last axis fuse with a matmul")
        return node, src

    def _rows(self, toks: frozenset[str]) -> str:
        return "[BLOCK_M, 1]" if "rm" in toks else "[1, 1]"

    def _part(self, op: str, v: str, m: str) -> str:
        return f"{_FN[op]}(tl.where({m}, {v}, {_FILL[op]}), axis=1)[:, None]"

    def _prepass(self, r: int, in_idx: Index) -> str:
        key = ("pre", r, in_idx)
        if key not in self.cache:
            op, x = self.program.nodes[r].op, self.program.nodes[r].inputs[0]
            level = self._level(r)  # after the pre-passes of the statistics it needs
            if level not in self.pres:
                self.pres[level] = _Ctx(f"q{level}_", self.main.tokens - {"rn", "rkb"}, True)
                self.pre_init[level], self.pre_fin[level] = [], []
            v = self.value(x, in_idx, self.pres[level])
            acc = self.name(f"stat{r}", self.t(v) - {"rk"})
            self.pre_init[level].append(f"{acc} = tl.full({self._rows(self.t(v))}, {_FILL[op]}, tl.float32)")
            self.pres[level].lines.append(f"{acc} = {_combine(op, acc, self._part(op, v, 'kmask'))}")
            if op == "mean":
                self.pre_fin[level].append(f"{acc} = {acc} * {1.0 / self.K!r}")
            self.cache[key] = acc
        return self.cache[key]

    def _level(self, r: int) -> int:
        x = self.program.nodes[r].inputs[0]
        return 1 + max((self._level(j) for j in self._ancestors(x) if self._is_reduce(j)), default=0)

    def _deferred(self, r: int, in_idx: Index) -> Tree:
        """A K statistic accumulated in the main loop, as a tree over its accumulators."""
        key = ("deferred", r, in_idx)
        if key not in self.cache:
            op, x = self.program.nodes[r].op, self.program.nodes[r].inputs[0]
            if op in ("max", "min"):
                if not self.loop_known(x):
                    raise _NeedPrepass({r})
                v = self.value(x, in_idx, self.main)
                acc = self.name(f"{op}{r}", self.t(v) - {"rk"})
                self.main_init.append(f"{acc} = tl.full({self._rows(self.t(v))}, {_FILL[op]}, tl.float32)")
                self.main.lines.append(f"{acc} = {_combine(op, acc, self._part(op, v, 'kmask'))}")
                total: Tree = ("acc", acc)
            else:
                parts = [_mul(c, ("c", float(self.K)) if base == ONE else ("acc", self._rowsum(base)))
                         for base, c in self.lin(x, in_idx).items()]
                total = _sum(parts)
                total = _mul(total, ("c", 1.0 / self.K)) if op == "mean" else total
            self.cache[key] = total
        return self.cache[key]

    def _across_n(self, r: int, in_idx: Index, ctx: _Ctx) -> str:
        op, x = self.program.nodes[r].op, self.program.nodes[r].inputs[0]
        scale = f" * {1.0 / self.N!r}" if op == "mean" else ""
        if not self.looped:  # the whole row is in this tile
            v = self.value(x, in_idx, self.tile)
            nm = self.name(f"e{r}", self.t(v) - {"rn"})
            self.tile.lines.append(f"{nm} = {self._part(op, v, 'nmask')}{scale}")
            return nm
        if ctx is not self.after:
            raise NotLowerable(f"a full-width value after {op} across N needs the whole row in one tile (BLOCK_N >= N)")
        key = ("row", r, in_idx)
        if key not in self.cache:
            v = self.value(x, in_idx, self.tile)
            acc = self.name(f"row{r}", self.t(v) - {"rn"})
            self.row_init.append(f"{acc} = tl.full({self._rows(self.t(v))}, {_FILL[op]}, tl.float32)")
            self.tile.lines.append(f"{acc} = {_combine(op, acc, self._part(op, v, 'nmask'))}")
            if scale:
                self.after.lines.append(f"{acc} = {acc}{scale}")
            self.cache[key] = acc
        return self.cache[key]

    # -- the left operand as terms ------------------------------------------------------------
    def lin(self, n: int, idx: Index) -> Lin:
        node = self.program.nodes[n]
        if node.op == "constant":
            return {ONE: ("c", float(node.attrs["value"]))}
        if "rk" not in _tokens(idx):  # constant along K: a coefficient, applied after the loop
            return {ONE: ("v", n, idx)}
        if self.loop_known(n):
            return {("v", n, idx): ONE}
        ins = [self.program.concrete_shape(j) for j in node.inputs]
        args = [(j, self.bcast(idx, self.program.concrete_shape(n), s)) for j, s in zip(node.inputs, ins)]
        if node.op in ("add", "sub"):
            a, b = self.lin(*args[0]), self.lin(*args[1])
            # x - mean(x) as x @ W - mean * colsum(W) cancels when |mean| >> std (and rounds x, not
            # x - mean, to the dot's input type): a statistic that shifts the tile is computed first
            self._unsafe({c for base, c in a.items() if base == ONE} if self._full(b) else set())
            self._unsafe({c for base, c in b.items() if base == ONE} if self._full(a) else set())
            return _lin_add(a, b, negate=node.op == "sub")
        if node.op == "neg":
            return {b: _neg(c) for b, c in self.lin(*args[0]).items()}
        if node.op in ("mul", "square"):
            a = self.lin(*args[0])
            b = a if node.op == "square" else self.lin(*args[1])
            if len(a) > 1 and len(b) > 1:  # expanding (sum)(sum) cancels too: E[x^2] - mean^2
                self._unsafe(set(a.values()) | set(b.values()))
            return _lin_mul(a, b)
        if node.op == "div":
            num, den = self.lin(*args[0]), self.lin(*args[1])
            if set(den) == {ONE}:
                return {b: ("div", c, den[ONE]) for b, c in num.items()}
            if len(den) == 1 and next(iter(den.values())) == ONE:
                d = next(iter(den))
                return {(("div", b, d) if b != ONE else ("div", ("c", 1.0), d)): c for b, c in num.items()}
            raise _NeedPrepass(self.deferred_in(node.inputs[1]))
        if node.op in ("broadcast_to", "transpose", "slice", *_VIEWS):
            return self.lin(node.inputs[0], self.index_map(n, idx))
        if node.op == "cast" and str(node.attrs["dtype"]) in ("fp32", "float32"):
            return self.lin(*args[0])
        raise _NeedPrepass(self.deferred_in(n))

    def _full(self, lin: Lin) -> bool:
        return any(base != ONE and "rm" in _tree_tokens(base) for base in lin)

    def _unsafe(self, coefs: set[Tree]) -> None:
        """Coefficients whose statistics must be known inside the loop: pre-pass them."""
        stats = set().union(*(self.deferred_in(leaf[1]) for c in coefs for leaf in _leaves(c)))
        if stats:
            raise _NeedPrepass(stats)

    def render(self, t: Tree, ctx: _Ctx) -> tuple[str, frozenset[str]]:
        kind = t[0]
        if kind == "one":
            return "1.0", frozenset()
        if kind == "c":
            return lit(t[1]), frozenset()
        if kind == "v":
            v = self.value(t[1], t[2], ctx)
            return v, self.t(v)
        if kind == "acc":
            return t[1], self.t(t[1])
        parts = [self.render(x, ctx) for x in t[1:]]
        toks = frozenset().union(*(p[1] for p in parts))
        if kind == "neg":
            return f"(-{parts[0][0]})", toks
        sym = {"add": "+", "mul": "*", "div": "/"}[kind]
        return f"({parts[0][0]} {sym} {parts[1][0]})", toks

    # -- the K loop ---------------------------------------------------------------------------
    def _raw(self, n: int, idx: Index) -> tuple[int, Index] | None:
        """The input tensor and index a value reads without computing (through views and transposes)."""
        while n in self.inside and self.program.nodes[n].op in ("broadcast_to", "transpose", "slice", *_VIEWS):
            idx, n = self.index_map(n, idx), self.program.nodes[n].inputs[0]
        return (n, idx) if n not in self.inside and self.program.nodes[n].op != "constant" else None

    def _operand(self, base: Tree, dims: tuple[str, str], ktok: str, fp32: bool, ctx: _Ctx) -> str:
        """A dot operand tile: loaded as stored when no op touches it, else computed in fp32 and zeroed
        past K (padding must add nothing); then cast to the dot's input type."""
        raw = self._raw(base[1], base[2]) if base[0] == "v" else None
        dt = "fp32" if fp32 else self.dot_dtype
        if raw is not None:  # masked lanes load as 0.0
            expr, toks = self._load(raw[0], raw[1], self.program.concrete_shape(raw[0]), "0.0")
            src = self.program.nodes[raw[0]].dtype.name
        else:
            expr, toks = self.render(base, ctx)
            src = "fp32"
        if self.need[ktok] and (raw is None or ktok not in toks):
            expr, toks, src = f"tl.where({self.mask(frozenset({ktok}))}, {expr}, 0.0)", toks | {ktok}, "?"
        if src != dt:
            expr = f"{expr}.to({_TL[dt]})" if expr.startswith("tl.") else f"({expr}).to({_TL[dt]})"
        if not set(dims) <= toks:  # a size-1 dim: the dot needs the whole tile
            expr = f"tl.broadcast_to({expr}, [{_SHAPE[dims[0]]}, {_SHAPE[dims[1]]}])"
        return expr

    def b_tile(self, fp32: bool, ctx: _Ctx) -> str:
        key = ("b", fp32, ctx.tag)
        if key not in self.cache:
            expr = self._operand(("v", self.b, self.dom_b), ("rkb", "rn"), "rkb", fp32, ctx)
            nm = self.name("b_f32" if fp32 else "b", frozenset({"rkb", "rn"}))
            ctx.lines.append(f"{nm} = {expr}")
            self.cache[key] = nm
        return self.cache[key]

    def _dot(self, base: Tree) -> str:
        key = ("dot", base)
        if key not in self.cache:
            j = self.accs["dot"]
            self.accs["dot"] += 1
            a = self.name(f"a{j}", frozenset({"rm", "rk"}))
            self.main.lines.append(f"{a} = {self._operand(base, ('rm', 'rk'), 'rk', self.fma, self.main)}")
            acc = self.name(f"acc{j}", frozenset({"rm", "rn"}))
            if self.fma:
                self.cache[key] = self._gemv(a, acc)
                return acc
            self.main_init.append(f"{acc} = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)")
            # tensor cores (wgmma on Hopper); fp32 operands stay exact with ieee (no tf32 rounding)
            ieee = ', input_precision="ieee"' if self.dot_dtype == "fp32" else ""
            self.main.lines.append(f"{acc} = tl.dot({a}, {self.b_tile(False, self.main)}, {acc}{ieee})")
            self.cache[key] = acc
        return self.cache[key]

    def _gemv(self, a: str, acc: str) -> str:
        """fma_reduce: N < 16 columns, so no padding to tl.dot's 16. Each column is a row reduction of
        the streamed [BLOCK_M, BLOCK_K] A tile times one [1, BLOCK_K] slice of B (memory-bound: A is
        read once, B is tiny and stays in L1/L2); the columns join into the output tile at the end."""
        parts = []
        for col in range(self.N):
            idx = tuple("rk" if i == "rkb" else str(col) if i == "rn" else i for i in self.dom_b)
            bj = self.value(self.b, idx, self.main)
            if self.need["rk"]:
                bj = f"tl.where(kmask, {bj}, 0.0)"
            part = self.name(f"{acc}_{col}", frozenset({"rm"}))
            self.main_init.append(f"{part} = tl.zeros([BLOCK_M, 1], dtype=tl.float32)")
            self.main.lines.append(f"{part} += tl.sum({a} * {bj}, axis=1)[:, None]")
            parts.append(part)
        expr = parts[-1]
        for col in reversed(range(len(parts) - 1)):
            expr = f"tl.where(rn == {col}, {parts[col]}, {expr})"
        self.tile.lines.append(f"{acc} = {expr}" + ("" if len(parts) > 1 else " + tl.zeros([1, BLOCK_N], tl.float32)"))
        return acc

    def _colsum(self, base: Tree) -> str:
        """sum_k base[k] * B[k, n] for a base without rows (a gamma, a bias, 1): a pass over B on CUDA
        cores after the tensor-core loop, [BLOCK_K, BLOCK_N] partials reduced once at its end."""
        key = ("colsum", base)
        if key not in self.cache:
            j = self.accs["colsum"]
            self.accs["colsum"] += 1
            if self.cols is None:
                self.cols = _Ctx("c", self.main.tokens - {"rm", "rk"}, True)
            part, acc = self.name(f"cs{j}", frozenset({"rkb", "rn"})), self.name(f"colsum{j}", frozenset({"rn"}))
            self.cols_init.append(f"{part} = tl.zeros([BLOCK_K, BLOCK_N], dtype=tl.float32)")
            w = self.b_tile(True, self.cols)
            if base == ONE:
                term = w
            else:
                v, _ = self.render(_subst(base, "rk", "rkb"), self.cols)
                term = f"tl.where(kmask_b, {v}, 0.0) * {w}" if self.need["rkb"] else f"{v} * {w}"
            self.cols.lines.append(f"{part} += {term}")
            self.cols_fin.append(f"{acc} = tl.sum({part}, axis=0)[None, :]")
            self.cache[key] = acc
        return self.cache[key]

    def _rowsum(self, base: Tree) -> str:
        key = ("rowsum", base)
        if key not in self.cache:
            j = self.accs["rowsum"]
            self.accs["rowsum"] += 1
            v, toks = self.render(base, self.main)
            acc = self.name(f"rowsum{j}", toks - {"rk"})
            self.main_init.append(f"{acc} = tl.zeros({self._rows(toks)}, dtype=tl.float32)")
            if not j:
                self.main.lines.append("# row statistics of the operand, from the tile in registers; they scale the "
                                       "accumulators after the loop")
            self.main.lines.append(f"{acc} += {self._part('sum', v, 'kmask')}")
            self.cache[key] = acc
        return self.cache[key]

    # -- outputs ------------------------------------------------------------------------------
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
        tiles_m, tiles_n = math.ceil(self.M / self.bm), math.ceil(self.N / self.bn)
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
        elif tiles_n == 1 or tiles_m == 1:
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


def _pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def lower(plan: FusionPlan, gi: int, tiling: Tiling | None, name: str, warp_size: int = 32,
          isa: str | None = None) -> GroupKernel:
    program = plan.program
    if any(program.nodes[n].dtype.name == "fp64" for n in plan.groups[gi].nodes):
        raise NotLowerable("float64 values stay in torch")
    t = dict(tiling.values) if tiling is not None else {}
    if "SPLIT_K" in t or (tiling is None and gemv_splitk.match(plan, gi) is not None):
        return gemv_splitk.lower(plan, gi, tiling, name, warp_size)
    bm, bn, bk = (int(t.get(k, d)) for k, d in (("BLOCK_M", 64), ("BLOCK_N", 64), ("BLOCK_K", 32)))
    warps, stages = int(t.get("num_warps", 4)), int(t.get("num_stages", 3))
    fma = isa == "fma_reduce"
    anchor = plan.groups[gi].anchor(program)
    if fma:  # the GEMV's few columns: no padding to tl.dot's 16
        bn = min(bn, _pow2(program.concrete_shape(anchor)[-1]))
    elif min(bm, bn, bk) < 16:
        raise NotLowerable(f"tl.dot needs tiles of at least 16 (BLOCK_M={bm}, BLOCK_N={bn}, BLOCK_K={bk})")
    outs = plan.outputs_of(gi)
    pre: frozenset[int] = frozenset()
    while True:
        kernel = _Kernel(plan, gi, (bm, bn, bk), fma, pre)
        try:
            body, grid = kernel.build(outs)
            break
        except _NeedPrepass as exc:
            if exc.reductions <= pre or not exc.reductions:
                raise NotLowerable("a prologue statistic cannot be computed before the K loop") from None
            pre = pre | exc.reductions
    if isa == "tl.dot+tma":
        body = tma.rewrite(body, {n: program.concrete_shape(n) for n in kernel.reads},
                           {n: program.nodes[n].dtype.itemsize for n in kernel.reads}, kernel.looped, kernel.wide)
    consts = [("BLOCK_M", bm), ("BLOCK_N", bn), ("BLOCK_K", bk)]
    if "GROUP_SIZE_M" in "\n".join(body):
        consts.append(("GROUP_SIZE_M", GROUP_SIZE_M))
    reads = tuple(kernel.reads)
    params = [f"p{n}" for n in reads] + [f"out{k}" for k in range(len(outs))] + [f"{c}: tl.constexpr" for c, _ in consts]
    src = "@triton.jit\ndef {}({}):\n{}\n".format(name, ", ".join(params), "\n".join("    " + ln for ln in body))
    item = max(program.nodes[j].dtype.itemsize for j in (kernel.a, kernel.b))
    # the largest tile a thread block holds: the fp32 accumulator (GEMV: the streamed A tile)
    block = max(bm * bk, bm * bn) if fma else bm * bn
    live = max(2, kernel.accs["dot"] + 1)
    res = resources(name, block, warps, grid, live, smem_bytes=(bm * bk + bk * bn) * item * stages, warp_size=warp_size)
    what = "GEMV (fma_reduce)" if fma else f"tl.dot {kernel.dot_dtype}" + (", TMA loads" if isa == "tl.dot+tma" else "")
    extra = [f"{len(kernel.pres)} K pre-passes" if kernel.pres else "",
             f"{kernel.accs['colsum']} column sums" if kernel.accs["colsum"] else "",
             f"{kernel.accs['rowsum']} row sums" if kernel.accs["rowsum"] else "",
             "whole rows per program, N tiles in a loop" if kernel.looped else ""]
    batch = f"{list(kernel.batch)} x " if kernel.batch else ""
    ops = "/".join(sorted({program.nodes[n].op for n in plan.groups[gi].nodes} - {"matmul"}))
    swizzle = f"GROUP_SIZE_M={GROUP_SIZE_M}, " if ("GROUP_SIZE_M", GROUP_SIZE_M) in consts else ""
    note = (f"matmul {batch}{kernel.M}x{kernel.N}x{kernel.K} (MxNxK){' + ' + ops if ops else ''}, {what}: "
            f"BLOCK_M={bm}, BLOCK_N={bn}, BLOCK_K={bk}, {swizzle}num_warps={warps}, num_stages={stages}, "
            f"{grid} programs" + "".join(f", {e}" for e in extra if e))
    return GroupKernel(name, src, reads, tuple(outs), grid, tuple(consts), warps, res, note, (("num_stages", stages),))
