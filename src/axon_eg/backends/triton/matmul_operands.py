"""Reductions and operands of a fused matmul kernel (a mixin of ``matmul._Kernel``): row statistics
in the prologue (in the K loop, deferred past it, or in a pre-pass), reductions across N in the epilogue,
the left operand as ``tl.dot`` accumulators, row sums and column sums, the right operand tile and the
GEMV (``fma_reduce``) step."""

from __future__ import annotations

from axon_eg.ir.program import Node

from .base import NotLowerable, attr
from .matmul_terms import (
    _FILL,
    _FN,
    _SHAPE,
    _TL,
    _VIEWS,
    ONE,
    Index,
    Lin,
    Tree,
    _combine,
    _Ctx,
    _leaves,
    _lin_add,
    _lin_mul,
    _mul,
    _NeedPrepass,
    _neg,
    _subst,
    _sum,
    _tokens,
    _tree_tokens,
)
from .tl_expressions import finish, lit, mean_scale


class _Operands:
    """Methods of ``matmul._Kernel`` that build its operands and reductions (state lives there)."""

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
            if (value := finish(op, acc, self.K)) != acc:
                self.pre_fin[level].append(f"{acc} = {value}")
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
            if _FN[op] != "tl.sum":  # max, min: a running extreme; sums (and means) are linear in the terms
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
                scale = mean_scale(op, self.K)
                total = _mul(total, ("c", scale)) if scale is not None else total
            self.cache[key] = total
        return self.cache[key]

    def _across_n(self, r: int, in_idx: Index, ctx: _Ctx) -> str:
        op, x = self.program.nodes[r].op, self.program.nodes[r].inputs[0]
        scale = "" if (s := mean_scale(op, self.N)) is None else f" * {s!r}"
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
        if node.is_constant:
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
        return (n, idx) if n not in self.inside and not self.program.nodes[n].is_constant else None

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
            # tensor cores (wgmma on Hopper); fp32 operands stay exact with ieee (fp32 FMAs) or the 3xTF32
            # split (``/3xtf32``), or take TF32 rounding where the precision policy allows it (``/tf32``)
            ieee = f', input_precision="{self.precision}"' if self.dot_dtype == "fp32" else ""
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
