"""Row-reduction groups (norms, softmax, log-softmax, logsumexp, group norm, row sums with their
producers and consumers) as one Triton kernel: ``ROWS`` rows per program, each row in ``BLOCK_N``
chunks, fp32 accumulation.

The group's anchor reduction reduces one block of consecutive axes of its input shape ``S``; that splits
``S`` into ``R`` rows (the kept axes: the leading ones, and those after the block, which makes it a column
reduction whose rows are contiguous output elements, read in place with no transpose through memory) by
``N`` columns (the reduced axes), and the program's block is ``rows [ROWS, 1] x cols [1, BLOCK_N]``.
Every value of the group is computed at an index tuple in its own shape, mapped backwards through the
group as in the element-wise lowering (broadcasting, reshapes through the flat index, squeezes),
starting from the domain index: the kept axes of ``S`` decomposed from ``rows``, the reduced ones from
``cols``. So a per-channel parameter of
group norm, a ``[N]`` gamma, a ``[R, 1]`` statistic or a full ``[R, N]`` tensor are all just
addresses; a reduction's result is a ``[ROWS, 1]`` block used wherever a consumer asks for it at
the row's own index.

When the row fits one chunk (``BLOCK_N >= N``) the kernel is one pass and every value stays in
registers; otherwise each reduction gets its own loop over the chunks (recomputing its element-wise
producers from HBM, which mostly hit L2) and a final loop stores the full-width outputs. What does
not fit (reduced axes that are not one block, a transpose inside the group, a reduction result used at
another row) raises ``NotLowerable``. Few long rows may be split across programs (``RowsTile.SPLIT``,
``_split_lower``): two launches, the partials combined in slice order.
"""

from __future__ import annotations

import math
import re

from axon_eg.extract.fusion import FusionPlan
from axon_eg.extract.templates import Tiling
from axon_eg.extract.templates.base import next_pow2
from axon_eg.ir import ops as O
from axon_eg.ir import traced

from .base import INT32_LIMIT, GroupKernel, NotLowerable, attr, cdiv, contiguous_strides, resources, unflat
from .elementwise import INDEXING, clamped, sliced
from .templates import RowsTile
from .tl_expressions import ELEMENTWISE, REDUCTIONS, finish, lit

Index = tuple[str, ...]
_VIEWS = O.views()
DOMAIN_FLAT = "flat"  # rows * N + cols, emitted once per scope
CHUNK_WEIGHT = "w_chunk"  # 1 / the chunk's number in its loop: a Welford update's weight, one scalar per chunk


def _bare(idx: Index | None) -> Index | None:
    """``idx`` without the parentheses that wrap a whole index expression (a view's round trip through the flat
    index writes the row as ``((rows))``), so that equal indices compare equal."""
    if idx is None:
        return None

    def strip(e: str) -> str:
        e = e.replace(" ", "")
        while e.startswith("(") and e.endswith(")"):
            depth = 0
            for k, ch in enumerate(e):
                depth += (ch == "(") - (ch == ")")
                if depth == 0 and k < len(e) - 1:
                    return e  # "(a)+(b)": the first parenthesis closes before the end
            e = e[1:-1]
        return e

    return tuple(strip(e) for e in idx)


def _flat(idx: Index, shape: tuple[int, ...]) -> str:
    terms = [i if s == 1 else f"{i} * {s}" for i, s, d in zip(idx, contiguous_strides(shape), shape) if d != 1 and i != "0"]
    return " + ".join(terms) or "0"


def _column_flat(r: int, n: int, i: int, rows_pp: int) -> str:
    """The address of a column reduction's element (row ``rows``: an output element, ``i`` of them contiguous per
    outer index; column ``cols``: the reduced index, stride ``i``) written so that Triton sees the rows
    contiguous: its coalescing pass then lays threads (and 16-byte vectors where ``i`` allows) along them.
    ``rows % i`` hides that (r03's L2 normalization over dim 0: threads along the 12 MB-strided columns), so
    with no outer axis (``r == i``) the row is its own offset, and where a program's ``rows_pp`` rows share one
    outer index (``i % rows_pp == 0``) the outer index and the offset come from the program id (scalars). Past
    2**31 elements the general form, whose rows are 64-bit."""
    if r * n < INT32_LIMIT:
        if r == i:
            return f"cols * {i} + rows"
        if rows_pp and i % rows_pp == 0:
            return f"((pid * ROWS) // {i}) * {n * i} + cols * {i} + (pid * ROWS) % {i} + tl.arange(0, ROWS)[:, None]"
    return f"(rows // {i}) * {n * i} + cols * {i} + rows % {i}"


class _Rows:
    def __init__(self, plan: FusionPlan, gi: int, block_n: int, dry: bool = False, split: int = 1, stage: int = 0,
                 slice_cols: int = 0, rows_pp: int = 0):
        """``dry``: walk the group exactly as the lowering does (the same index maps, names, memos and
        chunk loops, so the same refusals in the same order) without building the expressions (``check``).
        ``stage`` 1 / 2 of a split reduction (``split`` programs per row block): 1 reduces the program's
        slice of ``slice_cols`` columns of each row; 2 reads the reductions from the partials of stage 1.
        ``rows_pp``: the program's rows (``ROWS``; 0: not known), which a column reduction's address uses."""
        self.dry = dry
        self.split, self.stage, self.slice = split, stage, slice_cols
        self.program = plan.program
        self.inside = set(plan.groups[gi].nodes)
        reductions = [n for n in sorted(self.inside) if O.get(self.program.nodes[n].op).kind is O.OpKind.REDUCE]
        if not reductions:
            raise NotLowerable("no reduction in the group")
        first = reductions[0]
        self.domain = self.program.concrete_shape(self.program.nodes[first].inputs[0])
        axes = self._axes(first)
        d = self.domain
        kept_axes = [a for a in range(len(d)) if a not in axes]
        j = axes[-1] + 1 if axes else len(d)
        self.inner = max(math.prod(d[j:]), 1)  # kept axes after the reduced ones: a column reduction when > 1
        self.r = max(math.prod(d[a] for a in kept_axes), 1)
        self.n = max(math.prod(d[a] for a in axes), 1)
        i, n = self.inner, self.n
        self.block_n = block_n
        self.axes = axes
        if axes == tuple(range(axes[0] if axes else len(d), j)):  # one block of consecutive axes
            k = axes[0] if axes else len(d)
            outer, red, inner = d[:k], d[k:j], d[j:]
            kept = unflat("rows", (*outer, *inner))  # a row is one output element: the kept axes in order
            self.dom: Index = kept[:len(outer)] + unflat("cols", red) + kept[len(outer):]
            # one row (a full reduction): its columns are the address, which Triton then knows 16-byte aligned
            # (``rows * 0`` keeps the block's shape when a program holds more rows than the one there is)
            self.flat_expr = ("rows * 0 + cols" if self.r == 1 else f"rows * {n} + cols") if i == 1 else \
                _column_flat(self.r, n, i, rows_pp)
        else:  # reduced axes with kept ones between them (a variance over (N, L) of [N, C, L]): each axis's
            # index from the row (kept axes, row-major) or the column (reduced axes, row-major), read in place
            kept, red = iter(unflat("rows", tuple(d[a] for a in kept_axes))), iter(unflat("cols", tuple(d[a] for a in axes)))
            self.dom = tuple(next(red) if a in axes else next(kept) for a in range(len(d)))
            self.flat_expr = _flat(self.dom, d)
            if "rows" not in self.flat_expr:  # every kept axis of size 1: one row, which ``rows * 0`` keeps a block
                self.flat_expr = f"rows * 0 + {self.flat_expr}"
            if "cols" not in self.flat_expr:  # every reduced axis of size 1 too: ``cols * 0`` keeps the block's
                self.flat_expr = f"{self.flat_expr} + cols * 0"  # columns, the shape its full-width stores' mask has
        # a split's second stage loops over its program's slice when the group stores full-width outputs
        self.full = any(math.prod(self.program.concrete_shape(o)) == self.r * self.n for o in plan.outputs_of(gi))
        self.looped = block_n < self.n if stage == 0 else stage == 1 or self.full
        self.slots = reductions
        self.pairs = plan.welford_pairs(gi) if split > 1 else []
        self.online = plan.online_pairs(gi) if split > 1 else []
        self.lse = [n for n in reductions if self.program.nodes[n].op == "logsumexp"] if split > 1 else []
        paired = {x for pair in self.pairs + self.online for x in pair} | set(self.lse)
        self.plain = [n for n in reductions if n not in paired]  # a split's reductions with one partial each
        # the scratch buffer's slots: one per plain reduction, then per Welford pair its count, mean and sum of
        # squared deviations (stage 2 combines them by Chan's formula), per online (max, exp-sum) pair and per
        # logsumexp the slice's max and its sum of exp(x - that max) (stage 2 rescales them to the row's max)
        self.slot_of: dict = {n: k for k, n in enumerate(self.plain)}
        for k, (m, dev) in enumerate(self.pairs):
            at = len(self.plain) + 3 * k
            self.slot_of.update({("count", m): at, m: at + 1, dev: at + 2})
        at = len(self.plain) + 3 * len(self.pairs)
        for k, (m, e) in enumerate(self.online + [(("max", n), ("sum", n)) for n in self.lse]):
            self.slot_of.update({m: at + 2 * k, e: at + 2 * k + 1})
        self.n_slots = at + 2 * (len(self.online) + len(self.lse))
        self.top: list[str] = []  # straight-line code of the program
        self.body: list[str] | None = None  # the chunk loop being generated (multi-pass only)
        self.memo_top: dict[tuple, str] = {}
        self.memo_loop: dict[tuple, str] = {}
        self.flat_of: dict[tuple[Index, tuple[int, ...]], str] = {(self.dom, self.domain): DOMAIN_FLAT}
        self.reads: list[int] = []
        self.row_vars: set[str] = set()
        self.col_vars: set[str] = set()
        self.loops = 0
        self.count = 0
        self.vectors = 0  # the most [ROWS, BLOCK_N] accumulators one chunk loop keeps live
        for n in reductions:
            self._axes(n)  # every reduction must reduce its input the same way

    def _axes(self, n: int) -> tuple[int, ...]:
        """The reduced axes of reduction ``n`` (sorted; any set: the kept ones are the rows, the reduced ones
        the columns, each read in place); checks it reduces like the anchor."""
        node = self.program.nodes[n]
        src = self.program.concrete_shape(node.inputs[0])
        axes = tuple(sorted({int(a) % max(1, len(src)) for a in attr(self.program, n, "axes")}))
        if node.op not in (*REDUCTIONS, "logsumexp") or not src:
            raise NotLowerable(f"{node.op} over axes {list(axes)} of {list(src)} has no row-reduction lowering")
        if hasattr(self, "axes") and (src, axes) != (self.domain, self.axes):
            raise NotLowerable(f"{node.op} over axes {list(axes)} of {list(src)} reduces other rows than the group's")
        return axes

    # -- index maps -------------------------------------------------------------------------------
    def flat(self, idx: Index, shape: tuple[int, ...]) -> str:
        return self.flat_of.get((idx, shape)) or _flat(idx, shape)

    def unflat(self, flat: str, shape: tuple[int, ...]) -> Index:
        if flat == DOMAIN_FLAT and math.prod(shape) == self.r * self.n:
            idx = self.dom if shape == self.domain else self._digits(shape) or unflat(self.flat_expr, shape)
            self.flat_of[(idx, shape)] = DOMAIN_FLAT
            return idx
        return unflat(flat, shape)

    def _digits(self, shape: tuple[int, ...]) -> Index | None:
        """The index of ``shape`` (a view of the domain, as many elements) at the domain's position, each axis
        from the row and column indices themselves rather than through the flat one: per axis, the parts of
        its stride range that lie in the row's inner axes (``rows % inner``), in the reduced ones (``cols``)
        and in the outer ones (``rows // inner``). A per-channel parameter of a norm over a reshaped row then
        reads at ``rows % C`` (one load per row, hoisted out of the chunk loops) instead of dividing every
        element's flat offset (r13's InstanceNorm: ``((rows * 21903 + cols) // 21903) % 384``, two per-element
        gathers). Needs every axis boundary of ``shape`` and the domain's (``inner``, ``N * inner``) to divide
        one another (a chain); None otherwise (the flat decomposition then)."""
        i, n, total = self.inner, self.n, self.r * self.n
        strides = contiguous_strides(shape)
        bounds = {1, i, n * i, total}
        for s, d in zip(strides, shape):
            if d != 1:
                bounds |= {s, s * d}
        chain = sorted(bounds)
        if any(b % a for a, b in zip(chain, chain[1:])):
            return None
        pieces = ((1, i, f"rows % {i}"), (i, n * i, "cols"), (n * i, total, "rows" if i == 1 else f"rows // {i}"))
        out = []
        for s, d in zip(strides, shape):
            if d == 1:
                out.append("0")
                continue
            terms = []
            for lo, hi, src in reversed(pieces):  # the most significant part first
                a, b = max(s, lo), min(s * d, hi)
                if a >= b:
                    continue
                e = src
                if a // lo > 1:
                    e = f"({e}) // {a // lo}"
                if b < hi:
                    e = f"({e}) % {b // a}"
                terms.append(e if a == s else f"({e}) * {a // s}")
            out.append(terms[0] if len(terms) == 1 else "(" + " + ".join(terms) + ")")
        return tuple(out)

    @staticmethod
    def _broadcast(idx: Index, arg: tuple[int, ...]) -> Index:
        tail = idx[len(idx) - len(arg):] if arg else ()
        return tuple("0" if a == 1 else i for i, a in zip(tail, arg))

    def address_deps(self, addr: str) -> tuple[bool, bool]:
        """Whether an address depends on the block's rows and on its columns: the index maps build it from
        the tokens ``rows``, ``cols`` and the domain's flat index ``flat`` (both), integers, and the names of
        index values a gather loaded (which depend on what their own addresses do)."""
        tokens = set(re.findall(r"\w+", addr))
        return (bool(tokens & ({"rows", DOMAIN_FLAT} | self.row_vars)),
                bool(tokens & ({"cols", DOMAIN_FLAT} | self.col_vars)))

    def deps(self, args: list[str]) -> tuple[bool, bool]:
        """Whether a value computed from ``args`` (the names or literals ``value`` returned for its
        operands) depends on the block's rows and on its columns: through a value computed from them."""
        return any(a in self.row_vars for a in args), any(a in self.col_vars for a in args)

    # -- values -----------------------------------------------------------------------------------
    def value(self, n: int, idx: Index) -> str:
        node = self.program.nodes[n]
        if node.is_constant:
            return lit(node.attrs["value"])
        shape = self.program.concrete_shape(n)
        if n in self.inside and O.get(node.op).kind is O.OpKind.REDUCE:
            rows_idx = unflat("rows", shape) if math.prod(shape) == self.r else None
            # rows of one column: the domain's flat index rows * 1 + cols is the row (cols is 0 where stored)
            own = _bare(idx) == _bare(rows_idx) or (self.n == 1 and rows_idx is not None
                                                     and _bare(idx) == _bare(self.unflat(DOMAIN_FLAT, shape)))
            if not own:
                raise NotLowerable(f"{node.op} result read at {list(idx)}, not at its own row")
            return self._reduced(n)
        key = (n, idx)
        for memo in (self.memo_top, self.memo_loop):
            if key in memo:
                return memo[key]
        if n not in self.inside:
            if n not in self.reads:
                self.reads.append(n)
            addr = self.flat(idx, shape)
            if addr == DOMAIN_FLAT:
                addr = "flat"
            rows, cols = self.address_deps(addr)
            mask = {(True, True): "mask", (True, False): "rmask", (False, True): "cmask"}.get((rows, cols))
            to = "" if node.dtype.kind == "int" else ".to(tl.float32)"  # an index stays an integer (emit._integers)
            expr = "" if self.dry else (f"tl.load(p{n} + {addr}, mask={mask}, other=1.0)" if mask else
                                        f"tl.load(p{n}{'' if addr == '0' else ' + ' + addr})") + to
        elif node.op in ELEMENTWISE:
            ins = [self.program.concrete_shape(j) for j in node.inputs]
            args = [self.value(j, self._broadcast(idx, s)) for j, s in zip(node.inputs, ins)]
            expr = "" if self.dry else ELEMENTWISE[node.op](args, node.attrs)
            rows, cols = self.deps(args)
        elif node.op == "broadcast_to":
            expr = self.value(node.inputs[0], self._broadcast(idx, self.program.concrete_shape(node.inputs[0])))
            rows, cols = self.deps([expr])
        elif node.op == "slice":  # an index map: start + step * i along the axis
            axis, start, step = (int(attr(self.program, n, k)) for k in ("axis", "start", "step"))
            j = list(idx)
            j[axis] = sliced(idx[axis], start, step)
            expr = self.value(node.inputs[0], tuple(j))
            rows, cols = self.deps([expr])
        elif node.op in INDEXING:  # x at the index tensor's value along axis (clamped), as the element-wise emitter
            axis = int(attr(self.program, n, "axis"))
            x, index = node.inputs
            size = self.program.concrete_shape(x)[axis]
            at = self.value(index, idx if node.op == "gather" else (idx[axis],))
            j = list(idx)
            j[axis] = clamped(at, size)
            expr = self.value(x, tuple(j))
            rows, cols = self.deps([expr])
        elif node.op in _VIEWS:
            src = self.program.concrete_shape(node.inputs[0])
            expr = self.value(node.inputs[0], self.unflat(self.flat(idx, shape), src))
            rows, cols = self.deps([expr])
        else:
            raise NotLowerable(f"{node.op} has no row-reduction lowering")
        local = self.looped and cols
        if local and self.body is None:
            raise AssertionError("a full-width value outside a chunk loop")
        self.count += 1
        name = f"v{n}" if idx == self.dom else f"v{n}_{self.count}"
        if node.dtype.kind == "int":
            name = "ix" + name[1:]  # an index value (only gathers read integers here: emit._integers)
        if rows:
            self.row_vars.add(name)
        if cols:
            self.col_vars.add(name)
        (self.body if local else self.top).append(f"{name} = {expr}")
        (self.memo_loop if local else self.memo_top)[key] = name
        return name

    def _reduced(self, n: int) -> str:
        key = (n, "reduced")
        if key in self.memo_top:
            return self.memo_top[key]
        node = self.program.nodes[n]
        x = node.inputs[0]
        at = self.unflat(DOMAIN_FLAT, self.program.concrete_shape(x))
        if self.stage == 2 and any(n in pair for pair in self.pairs):
            self._welford_partials(next(pair for pair in self.pairs if n in pair))
            return self.memo_top[key]
        if self.stage == 2 and (n in self.lse or any(n in pair for pair in self.online)):
            self._online_partials(n)
            return self.memo_top[key]
        if self.stage == 2:  # the slices' partials, combined in slice order
            fill, fn = REDUCTIONS[node.op]
            base = self.slot_of[n] * self.r * self.split
            self.top.append(f"acc{n} = {fn}(tl.load(part + {base} + rows * {self.split} + sidx, mask=rmask & smask, "
                            f"other={fill}), axis=1)[:, None]")
            self.top.append(f"v{n} = {finish(node.op, f'acc{n}', self.n)}")
            self.memo_top[key] = f"v{n}"
            self.row_vars.add(f"v{n}")
            return f"v{n}"
        if node.op == "logsumexp" and self.looped:  # its max and sum in one pass over the row, online
            m, s = self._looped([], online=[(x, at, f"m{n}", f"s{n}")])[-2:]
            expr = f"{m} + tl.log({s})"
        elif node.op == "logsumexp":
            m = self._reduction(x, at, "max", f"m{n}")
            s = self._reduction(x, at, "sum", f"s{n}", shift=m)
            expr = f"{m} + tl.log({s})"
        else:
            acc = self._reduction(x, at, node.op, f"acc{n}")
            expr = finish(node.op, acc, self.n)
        self.top.append(f"v{n} = {expr}")
        self.memo_top[key] = f"v{n}"
        self.row_vars.add(f"v{n}")
        return f"v{n}"

    def _welford_partials(self, pair: tuple[int, int]) -> None:
        """A split's second stage: the Welford pair's mean and deviation reduction from its slices' counts,
        means and sums of squared deviations (Chan's formula in plain sums, in slice order: the combine the
        chunk loop's lanes get after the loop)."""
        m, dev = pair
        load = "tl.load(part + {} + rows * {} + sidx, mask=rmask & smask, other=0.0)"
        cnt, mean, m2 = (load.format(self.slot_of[k] * self.r * self.split, self.split) for k in (("count", m), m, dev))
        self.top += [f"c{m}_s = {cnt}", f"acc{m}_s = {mean}", f"m2{dev}_s = {m2}",
                     f"n{m} = tl.sum(c{m}_s, axis=1)[:, None]",
                     f"acc{m} = tl.sum(c{m}_s * acc{m}_s, axis=1)[:, None] / tl.maximum(n{m}, 1.0)",
                     f"acc{dev} = tl.sum(m2{dev}_s + c{m}_s * (acc{m}_s - acc{m}) * (acc{m}_s - acc{m}), axis=1)[:, None]",
                     f"v{m} = acc{m}", f"v{dev} = {finish(self.program.nodes[dev].op, f'acc{dev}', self.n)}"]
        for k in (m, dev):
            self.memo_top[(k, "reduced")] = f"v{k}"
            self.row_vars.add(f"v{k}")

    def _online_partials(self, n: int) -> None:
        """A split's second stage: an online (max, exp-sum) pair's or a logsumexp's value from its slices' maxes
        ``m_k`` and sums ``s_k`` of ``exp(x - m_k)``: the row's max ``M = max_k m_k`` and its sum
        ``sum_k s_k * exp(m_k - M)`` (rule ``exp_online_rescale``), in slice order."""
        pair = next((p for p in self.online if n in p), None)
        m_key, s_key = pair if pair else (("max", n), ("sum", n))
        load = "tl.load(part + {} + rows * {} + sidx, mask=rmask & smask, other={})"
        ms = load.format(self.slot_of[m_key] * self.r * self.split, self.split, REDUCTIONS["max"][0])
        ss = load.format(self.slot_of[s_key] * self.r * self.split, self.split, "0.0")
        self.top += [f"mo{n}_s = {ms}", f"so{n}_s = {ss}", *_online_finish(f"mo{n}_s", f"so{n}_s", f"mo{n}", f"so{n}")]
        if pair:
            m, e = pair
            self.top += [f"v{m} = mo{n}", f"v{e} = so{n}"]
            done = pair
        else:
            self.top.append(f"v{n} = mo{n} + tl.log(so{n})")
            done = (n,)
        for k in done:
            self.memo_top[(k, "reduced")] = f"v{k}"
            self.row_vars.add(f"v{k}")

    def _reduction(self, x: int, at: Index, op: str, acc: str, shift: str | None = None) -> str:
        fill, fn = REDUCTIONS[op]
        if not self.looped:
            v = self.value(x, at)
            term = f"tl.exp({v} - {shift})" if shift else v
            self.top.append(f"{acc} = {fn}(tl.where(mask, {term}, {fill}), axis=1)[:, None]")
            return acc
        return self._looped([(x, at, op, acc, shift)])[0]

    def _looped(self, terms: list[tuple[int, Index, str, str, str | None]],
                welford: list[tuple[int, int, Index]] = (), online: list[tuple[int, Index, str, str]] = ()) -> list[str]:
        """One chunk loop computing every reduction of ``terms`` ((input, its index, op, accumulator name,
        shift of logsumexp's exp or None)): per reduction a [ROWS, BLOCK_N] accumulator combined element-wise
        in the loop (no cross-warp reduction per chunk) and reduced across the block once after it; a value
        two reductions share is computed (and loaded) once per chunk. ``welford`` ((mean, deviation
        reduction, the mean's input index) of ``FusionPlan.welford_pairs``) adds per pair Welford's update
        of a per-lane count, mean and sum of squared deviations, combined across the block after the loop
        (Chan's formula, in plain sums): the mean and the deviations' sum in this one pass over the row. A lane
        that is in the row at a chunk was in it at every earlier one (the columns only grow), so its count there
        is the chunk's number: the update multiplies by that chunk's ``1 / count`` (:data:`CHUNK_WEIGHT`, one
        scalar per chunk) instead of dividing every element (an IEEE fp32 division per element made the one
        Welford pass slower than two plain ones: r07's variance 568 us against 497 on the H200). ``online``
        ((input, its index, max name, sum name)) adds per item a per-lane running max and a running sum of
        ``exp(x - max)`` rescaled by ``exp(old - new)`` as the max grows (rule ``exp_online_rescale``), combined
        across the block after the loop the same way: a softmax's or logsumexp's max and sum in one pass. The
        names of ``terms``' accumulators, then each online item's max and sum."""
        saved = (self.body, self.memo_loop)
        self.body, self.memo_loop = [], {}
        program = self.program
        finals: list[str] = []
        for m, dev, at in welford:
            v = self.value(program.nodes[m].inputs[0], at)
            cnt, mean, m2, delta = f"n{m}_v", f"acc{m}_v", f"m2{dev}_v", f"d{m}_w"
            self.top += [f"{name} = tl.zeros([ROWS, BLOCK_N], tl.float32)" for name in (cnt, mean, m2)]
            self.body += [f"{cnt} = {cnt} + tl.where(mask, 1.0, 0.0)", f"{delta} = tl.where(mask, {v} - {mean}, 0.0)",
                          f"{mean} = {mean} + {delta} * {CHUNK_WEIGHT}",
                          f"{m2} = {m2} + {delta} * tl.where(mask, {v} - {mean}, 0.0)"]
            finals += [f"n{m} = tl.sum({cnt}, axis=1)[:, None]",
                       f"acc{m} = tl.sum({cnt} * {mean}, axis=1)[:, None] / tl.maximum(n{m}, 1.0)",
                       f"acc{dev} = tl.sum({m2} + {cnt} * ({mean} - acc{m}) * ({mean} - acc{m}), axis=1)[:, None]"]
        neg = REDUCTIONS["max"][0]
        for x, at, mname, sname in online:
            v = self.value(x, at)
            mv, sv, xo, mn, mz = f"{mname}_v", f"{sname}_v", f"{mname}_x", f"{mname}_n", f"{mname}_z"
            self.top += [f"{mv} = tl.full([ROWS, BLOCK_N], {neg}, tl.float32)", f"{sv} = tl.zeros([ROWS, BLOCK_N], tl.float32)"]
            self.body += [f"{xo} = tl.where(mask, {v}, {neg})", f"{mn} = tl.maximum({mv}, {xo})",
                          f"{mz} = tl.where({mn} == {neg}, 0.0, {mn})  # no lane value yet: no shift (no inf - inf)",
                          f"{sv} = {sv} * tl.exp({mv} - {mz}) + tl.exp({xo} - {mz})  # exp_online_rescale",
                          f"{mv} = {mn}"]
            finals += _online_finish(mv, sv, mname, sname)
        out = []
        for x, at, op, acc, shift in terms:
            fill, fn = REDUCTIONS[op]
            v = self.value(x, at)
            term = f"tl.exp({v} - {shift})" if shift else v
            vec = f"{acc}_v"
            part = f"tl.where(mask, {term}, {fill})"
            combine = {"tl.sum": f"{vec} + {part}", "tl.max": f"tl.maximum({vec}, {part})",
                       "tl.min": f"tl.minimum({vec}, {part})"}[fn]
            self.body.append(f"{vec} = {combine}")
            self.top.append(f"{vec} = tl.full([ROWS, BLOCK_N], {fill}, tl.float32)")
            out.append((vec, fn, acc))
        self.top += self.loop(self.body)
        self.top += [f"{acc} = {fn}({vec}, axis=1)[:, None]" for vec, fn, acc in out] + finals
        self.vectors = max(self.vectors, len(out) + 3 * len(welford) + 2 * len(online))
        self.body, self.memo_loop = saved
        return [acc for _, _, acc in out] + [name for _, _, mname, sname in online for name in (mname, sname)]

    def reduce_together(self, ns: list[int], welford: list[tuple[int, int]] = (),
                        online: list[tuple[int, int]] = (), lse: list[int] = ()) -> list[str]:
        """Reductions ``ns`` (independent of each other: ``FusionPlan.sibling_reductions``) in one chunk loop; their
        results are then what :meth:`value` returns for them. With ``welford`` ((mean, deviation reduction) pairs,
        chunked rows only) the loop also computes each pair by Welford's update (the means leave ``ns``); with
        ``online`` ((max, exp-sum) pairs: ``FusionPlan.online_pairs``) and ``lse`` (logsumexps reading no other
        reduction), chunked rows only, each pair's or logsumexp's max and sum online. The accumulators' names of
        ``ns``, then each online pair's and logsumexp's max and sum."""
        program = self.program
        welford = list(welford) if self.looped else []
        online, lse = (list(online), list(lse)) if self.looped else ([], [])
        paired = {m for m, _ in welford} | {m for m, _ in online}
        terms = []
        for n in ns:
            if n in paired:
                continue
            x = program.nodes[n].inputs[0]
            terms.append((x, self.unflat(DOMAIN_FLAT, program.concrete_shape(x)), program.nodes[n].op, f"acc{n}", None))
        def at(m: int) -> Index:
            return self.unflat(DOMAIN_FLAT, program.concrete_shape(program.nodes[m].inputs[0]))

        pairs = [(m, dev, at(m)) for m, dev in welford]
        items = ([(program.nodes[m].inputs[0], at(m), f"acc{m}", f"acc{e}") for m, e in online]
                 + [(program.nodes[n].inputs[0], at(n), f"m{n}", f"s{n}") for n in lse])
        accs = self._looped(terms, pairs, items) if self.looped else [self._reduction(*t[:4]) for t in terms]
        for m, dev in welford:
            self.top += [f"v{m} = acc{m}", f"v{dev} = {finish(program.nodes[dev].op, f'acc{dev}', self.n)}"]
            for n in (m, dev):
                self.memo_top[(n, "reduced")] = f"v{n}"
                self.row_vars.add(f"v{n}")
        if self.stage != 1:
            self.top += [f"v{k} = acc{k}" for pair in online for k in pair] + [f"v{n} = m{n} + tl.log(s{n})" for n in lse]
            for k in [k for pair in online for k in pair] + lse:
                self.memo_top[(k, "reduced")] = f"v{k}"
                self.row_vars.add(f"v{k}")
        ns = [n for n in ns if n not in paired]
        if self.stage != 1:
            for n, acc in zip(ns, accs):
                self.top.append(f"v{n} = {finish(program.nodes[n].op, acc, self.n)}")
                self.memo_top[(n, "reduced")] = f"v{n}"
                self.row_vars.add(f"v{n}")
        return accs

    def loop(self, body: list[str]) -> list[str]:
        """The chunk loop over ``body``. One row whose length is not a multiple of BLOCK_N: a loop over the
        whole chunks, whose mask bound is a multiple of BLOCK_N (constant over each vector: 16-byte loads),
        then the last, partial chunk with the row's own bound (scalar loads), in the slice that holds it."""
        self.loops += 1
        n, full = self.n, self.n // self.block_n * self.block_n
        sliced = self.stage in (1, 2)  # a split's program: its slice of the row
        lo, hi = (f"split * {self.slice}", f"split * {self.slice} + {self.slice}") if sliced else ("0", str(n))
        if self.r == 1 and self.inner == 1 and n % self.block_n and full:
            spans = ([(f"{lo}, tl.minimum({hi}, {full})", full), (f"tl.maximum({lo}, {full}), tl.minimum({hi}, {n})", n)]
                     if sliced else [(f"0, {full}", full), (f"{full}, {n}", n)])
        else:
            spans = [(f"{lo}, {hi}", n)]
        weight = ([f"    {CHUNK_WEIGHT} = 1.0 / ((c0 - {lo}) // BLOCK_N + 1)"]
                  if any(CHUNK_WEIGHT in ln for ln in body) else [])  # the chunk's number, from the slice's start
        out: list[str] = []
        for k, (span, bound) in enumerate(spans):
            tail = "  # the partial last chunk" if k else ""
            out += [f"for c0 in range({span}, BLOCK_N):{tail}", "    cols = c0 + tl.arange(0, BLOCK_N)[None, :]",
                    f"    cmask = cols < {bound}", "    mask = rmask & cmask", f"    flat = {self.flat_expr}",
                    *weight, *("    " + ln for ln in body)]
        return out


def _online_finish(mv: str, sv: str, m: str, s: str) -> list[str]:
    """The block's max ``m`` and its sum ``s`` of ``exp(x - m)`` from per-lane (or per-slice) running maxes ``mv``
    and sums ``sv`` (each relative to its own max): ``s = sum(sv * exp(mv - m))`` (rule ``exp_online_rescale``);
    a row with no value at all keeps ``-inf`` and 0."""
    neg = REDUCTIONS["max"][0]
    return [f"{m} = tl.max({mv}, axis=1)[:, None]", f"{m}_z = tl.where({m} == {neg}, 0.0, {m})",
            f"{s} = tl.sum({sv} * tl.exp({mv} - {m}_z), axis=1)[:, None]"]


def _output_kinds(plan: FusionPlan, gi: int, rows: _Rows) -> dict[int, str]:
    """Each output's kind: ``full`` (rows x cols) or ``row`` (one value per row); NotLowerable for another size."""
    program = plan.program
    kinds: dict[int, str] = {}
    for o in plan.outputs_of(gi):
        size = math.prod(program.concrete_shape(o))
        kind = "full" if size == rows.r * rows.n else "row" if size == rows.r else None
        if kind is None:
            raise NotLowerable(f"output {o} of shape {list(program.concrete_shape(o))} is neither rows nor rows x cols")
        kinds[o] = kind
    return kinds


def check(plan: FusionPlan, gi: int, tiling: Tiling | None, warp_size: int | None = None,
          isa: str | None = None) -> bool:
    """NotLowerable with :func:`lower`'s reason, without generating code: float64, no reduction, reductions
    that are not of the same trailing axes, outputs neither rows nor rows x cols, then (``_walk`` with a dry
    ``_Rows``: the lowering's own walk, index maps and chunk loops, building no expression) an op without a
    row-reduction lowering or a reduction result read at another row. When the walk passes, the lowering
    cannot refuse: True, decided without source. :func:`lower` calls it first."""
    if any(plan.program.nodes[n].dtype.name == "fp64" for n in plan.groups[gi].nodes):
        raise NotLowerable("float64 values stay in torch")
    tile = RowsTile.read(tiling)
    probe = _Rows(plan, gi, 1 << 62)  # sizes only
    _output_kinds(plan, gi, probe)
    if probe.n >= INT32_LIMIT and tile.SPLIT == 1:
        raise NotLowerable(f"a row of {probe.n} columns (2^31 or more) is reduced by a split (RowsTile.SPLIT > 1)")
    if tile.SPLIT > 1:
        _split_check(plan, gi, probe)
        _walk(plan, gi, _Rows(plan, gi, tile.row_block(probe.n), dry=True, split=tile.SPLIT, stage=2))
        return True
    _walk(plan, gi, _Rows(plan, gi, tile.row_block(probe.n), dry=True))
    return True


def _walk(plan: FusionPlan, gi: int, em: _Rows) -> tuple[list[int], list[str]]:
    """The group's outputs and their stores: row outputs, then the full-width ones (in a final chunk loop
    when the row is chunked), every value computed through ``em``."""
    program = plan.program
    outs = plan.outputs_of(gi)
    kinds = _output_kinds(plan, gi, em)
    stores: list[str] = []
    if em.looped and em.stage == 0:
        together, pairs, online = plan.sibling_reductions(gi), plan.welford_pairs(gi), plan.online_pairs(gi)
        if len(together) > 1 or pairs or online:
            em.reduce_together(together, pairs, online)
    row_mask = "rmask & (rows * 0 + split == 0)" if em.stage == 2 and em.full else "rmask"  # stored once per row
    for k, o in enumerate(outs):
        if kinds[o] == "row":
            v = em.value(o, unflat("rows", program.concrete_shape(o)))
            stores.append(f"tl.store(out{k} + rows, {v}, mask={row_mask})")
    full = [(k, o) for k, o in enumerate(outs) if kinds[o] == "full"]
    if full and em.looped:
        em.body, em.memo_loop = [], {}
        for k, o in full:
            v = em.value(o, em.unflat(DOMAIN_FLAT, program.concrete_shape(o)))
            em.body.append(f"tl.store(out{k} + flat, {v}, mask=mask)")
        stores += em.loop(em.body)
        em.body = None
    else:
        for k, o in full:
            v = em.value(o, em.unflat(DOMAIN_FLAT, program.concrete_shape(o)))
            stores.append(f"tl.store(out{k} + flat, {v}, mask=mask)")
    return outs, stores


def _split_check(plan: FusionPlan, gi: int, rows: _Rows) -> None:
    """NotLowerable unless the group can be a split reduction: every reduction combinable from slices (sum,
    mean, max, min) of values that need no other reduction, or the deviation reduction of a Welford pair
    (``FusionPlan.welford_pairs``: a variance, combined from the slices' counts, means and squared
    deviations). Full-width outputs are computed by the second stage, each program over its slice."""
    program = plan.program
    _output_kinds(plan, gi, rows)
    siblings = (set(plan.sibling_reductions(gi)) | {dev for _, dev in plan.welford_pairs(gi)}
                | {e for _, e in plan.online_pairs(gi)})
    for n in rows.slots:
        op = program.nodes[n].op
        if op == "logsumexp" and not any(O.get(program.nodes[j].op).kind is O.OpKind.REDUCE for j in plan.feeding(gi, n)):
            continue  # combined from the slices' maxes and exp-sums
        if op not in O.simple_reductions():
            raise NotLowerable(f"split: {op} is not combined from slices")
        if n not in siblings:
            raise NotLowerable(f"split: {op} reads the reduction result of another reduction of the same row")


def _split_lower(plan: FusionPlan, gi: int, tile: RowsTile, name: str, warp_size: int | None) -> GroupKernel:
    """The split reduction as two launches: ``{name}_part`` (``SPLIT`` programs per row block, each reducing
    a contiguous slice of whole chunks of the row) stores each reduction's fp32 partial; ``{name}_finish``
    combines a row's partials in slice order (deterministic) and computes and stores the group's outputs.
    The host function allocates the partials and launches both."""
    program = plan.program
    probe = _Rows(plan, gi, 1 << 62)
    _split_check(plan, gi, probe)
    block_n, rows_pp, warps, split = tile.row_block(probe.n), tile.ROWS_PER_PROGRAM, tile.num_warps, tile.SPLIT
    chunk = math.ceil(math.ceil(probe.n / block_n) / split) * block_n  # columns per slice, whole chunks
    wide = probe.r * probe.n >= INT32_LIMIT  # 64-bit offsets (rows * N + cols, slice starts)
    i64 = ".to(tl.int64)" if wide else ""
    row_head = [f"rows = (pid * ROWS + tl.arange(0, ROWS)){i64}[:, None]", f"rmask = rows < {probe.r}"]
    one = _Rows(plan, gi, block_n, split=split, stage=1, slice_cols=chunk, rows_pp=rows_pp)
    accs = one.reduce_together(one.plain, one.pairs, one.online, one.lse)
    online = accs[len(accs) - 2 * (len(one.online) + len(one.lse)):]  # each pair's and logsumexp's max and sum
    accs = accs[:len(accs) - len(online)]
    for m, dev in one.pairs:
        accs += [f"n{m}", f"acc{m}", f"acc{dev}"]  # the slice's count, mean and sum of squared deviations
    accs += online  # the slice's max and its sum of exp(x - that max), per pair and per logsumexp
    stores = [f"tl.store(part + {j * probe.r * split} + rows * {split} + split, {acc}, mask=rmask)"
              for j, acc in enumerate(accs)]
    part_body = (["pid = tl.program_id(0) // SPLIT  # the row block",
                  f"split = (tl.program_id(0) % SPLIT){i64}  # its slice",
                  *row_head, f"# slice split: columns [{chunk} * split, {chunk} * (split + 1)) of {probe.n}"]
                 + one.top + stores)
    two = _Rows(plan, gi, block_n, split=split, stage=2, slice_cols=chunk, rows_pp=rows_pp)
    two.reads = list(one.reads)
    outs, out_stores = _walk(plan, gi, two)
    # with full-width outputs the finish has SPLIT programs per row block too, each storing its slice
    finish_head = (["pid = tl.program_id(0) // SPLIT  # the row block",
                    f"split = (tl.program_id(0) % SPLIT){i64}  # its slice of the full-width outputs"]
                   if two.full else ["pid = tl.program_id(0)"])
    finish_body = (finish_head + [*row_head, "sidx = tl.arange(0, SPLIT_P)[None, :]",
                                  f"smask = sidx < {split}", f"# the {split} slices' partials, combined in slice order"]
                   + two.top + out_stores)
    reads = tuple(two.reads)
    params = [f"p{j}" for j in reads] + [f"out{k}" for k in range(len(outs))] + ["part"]
    consts = (("ROWS", rows_pp), ("BLOCK_N", block_n), ("SPLIT", split), ("SPLIT_P", next_pow2(split)))

    def jit(fn: str, lines: list[str]) -> str:
        return "@triton.jit\ndef {}({}):\n{}\n".format(
            fn, ", ".join(params + [f"{c}: tl.constexpr" for c, _ in consts]), "\n".join("    " + ln for ln in lines))

    row_blocks = cdiv(probe.r, rows_pp)
    args = ", ".join(params)
    kw = ", ".join(f"{c}={v}" for c, v in consts)
    host = f'''def {name}({", ".join(params[:-1])}, **launch):
    """Both launches of the group; ``launch``: vendor launch knobs (Intel XPU grf_mode, warp_size)."""
    part = torch.empty(({one.n_slots}, {probe.r}, {split}), dtype=torch.float32, device=out0.device)
    {name}_part[({row_blocks * split},)]({args}, {kw}, num_warps={warps}, **launch)
    {name}_finish[({row_blocks * split if two.full else row_blocks},)]({args}, {kw}, num_warps={warps}, **launch)
'''
    src = jit(f"{name}_part", part_body) + "\n\n" + jit(f"{name}_finish", finish_body) + "\n\n" + host
    live = max(2, len(reads) + len(outs)) + one.vectors
    ops = sorted({program.nodes[n].op for n in plan.groups[gi].nodes})
    note = (f"row reduction {'/'.join(ops)} over {probe.r} rows x {probe.n}, split: SPLIT={split} slices of {chunk} "
            f"per row, ROWS={rows_pp}, BLOCK_N={block_n}, num_warps={warps}, {row_blocks * split} programs, then "
            f"{row_blocks * split if two.full else row_blocks} combine the fp32 partials in order"
            f"{' and store their slices' if two.full else ''}")
    return GroupKernel(name, src, reads, tuple(outs), row_blocks * split, consts, warps,
                       resources(f"{name}_part", rows_pp * block_n, warps, row_blocks * split, live,
                                 smem_bytes=rows_pp * warps * 4, warp_size=warp_size),
                       note, host=True)


def lower(plan: FusionPlan, gi: int, tiling: Tiling | None, name: str, warp_size: int | None = None,
          isa: str | None = None) -> GroupKernel:
    program = plan.program
    check(plan, gi, tiling, warp_size, isa)
    tile = RowsTile.read(tiling)
    if tile.SPLIT > 1:
        return _split_lower(plan, gi, tile, name, warp_size)
    probe = _Rows(plan, gi, 1 << 62)  # sizes only
    block_n, rows_pp, warps = tile.row_block(traced.concrete(probe.n)), tile.ROWS_PER_PROGRAM, tile.num_warps
    em = _Rows(plan, gi, block_n, rows_pp=rows_pp)
    i64 = ".to(tl.int64)" if em.r * em.n >= INT32_LIMIT else ""  # 64-bit offsets rows * N + cols
    head = ["pid = tl.program_id(0)", f"rows = (pid * ROWS + tl.arange(0, ROWS)){i64}[:, None]", f"rmask = rows < {em.r}"]
    if not em.looped:
        head += ["cols = tl.arange(0, BLOCK_N)[None, :]", f"cmask = cols < {em.n}", "mask = rmask & cmask",
                 f"flat = {em.flat_expr}"]
    outs, stores = _walk(plan, gi, em)
    reads = tuple(em.reads)
    params = [f"p{n}" for n in reads] + [f"out{k}" for k in range(len(outs))]
    body = head + em.top + stores
    src = "@triton.jit\ndef {}({}, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):\n{}\n".format(
        name, ", ".join(params), "\n".join("    " + ln for ln in body))
    grid = cdiv(em.r, rows_pp)
    ops = sorted({program.nodes[n].op for n in plan.groups[gi].nodes})
    passes = f"{em.loops} chunk loops" if em.looped else "one pass"
    live = max(2, len(reads) + len(outs)) + em.vectors
    return GroupKernel(name, src, reads, tuple(outs), grid, (("ROWS", rows_pp), ("BLOCK_N", block_n)), warps,
                       resources(name, rows_pp * block_n, warps, grid, live, smem_bytes=rows_pp * warps * 4,
                                 warp_size=warp_size),
                       f"row reduction {'/'.join(ops)} over {em.r} rows x {em.n}: ROWS={rows_pp}, BLOCK_N={block_n}, "
                       f"num_warps={warps}, {passes}, {grid} programs",
                       grid_meta=f"triton.cdiv({em.r}, META['ROWS'])",
                       tiling_keys=(("ROWS", "ROWS_PER_PROGRAM"), ("BLOCK_N", "BLOCK_N")))
