"""Element-wise groups (with broadcasting, views, transposes, slices and concats on load) as one
1-D Triton kernel over the output's elements.

Each value is computed at an index tuple (one index expression per dim of its shape), starting from
the output's decomposed flat offset and mapped backwards through the group: broadcasting zeroes the
size-1 dims, a transpose permutes the tuple, a reshape goes through the flat index, a slice scales
and shifts, a concat selects its operand with ``tl.where`` and masked loads. Loads whose index is the
output's own offset stay contiguous so Triton vectorizes them; so do loads at the offset shifted by a
constant or taken modulo a broadcast operand's size (``offs + 64``, ``offs % 262144``), and domain indices
no address uses are not computed.
"""

from __future__ import annotations

import itertools
import math
import re

from axon_eg.extract.fusion import FusionPlan
from axon_eg.extract.templates import Tiling
from axon_eg.ir import ops as O
from axon_eg.ir import traced

from .base import GroupKernel, NotLowerable, attr, cdiv, contiguous_strides, resources, unflat
from .templates import ElementwiseTile
from .tl_expressions import ELEMENTWISE, lit

Index = tuple[str, ...]
POOLS = frozenset(f"{kind}_pool{n}d" for kind in ("max", "avg") for n in (1, 2, 3))
"""The pooling ops the emitter computes window by window (a library group whose ISA choice is ``window``)."""
MAX_WINDOW = 64
"""The most window positions a pooling output unrolls (a 4 x 4 x 4 window; larger ones stay in torch)."""
_SHIFT = re.compile(r"^\((.+) ([+-]) (\d+)\)$")


def _shifted(expr: str) -> tuple[str, int] | None:
    """``(name, c)`` when ``expr`` is an index variable ``i<k>`` plus or minus integer constants (the forms
    slices and concats write: ``(i3 + 64)``, ``((i3 - 64) + 0)``), else None."""
    shift = 0
    while not re.fullmatch(r"i\d+", expr):
        m = _SHIFT.match(expr)
        if m is None:
            return None
        expr, sign, k = m.groups()
        shift += int(k) if sign == "+" else -int(k)
    return expr, shift


class _Emitter:
    def __init__(self, plan: FusionPlan, gi: int, domain: tuple[int, ...], dom: Index | None = None):
        """``dom``: the domain's index tuple when the caller builds it (tiled layouts, scans); by default
        the output's flat offset ``offs`` decomposed over ``domain``."""
        self.program = plan.program
        self.inside = set(plan.groups[gi].nodes)
        self.domain = domain
        self.lines: list[str] = []
        self.memo: dict[tuple, str] = {}
        self.reads: list[int] = []
        self.from_offs = dom is None  # the domain's indices decompose the flat offset ``offs``
        self.merged: set[str] = set()  # indices over runs of the domain's axes (``_merged``)
        self.scalar_indices: set[str] = set()  # integer index values loaded once for the whole block
        if dom is not None:
            self.dom: Index = dom
            return
        st = contiguous_strides(domain)
        idx = []
        for k, (d, s) in enumerate(zip(domain, st)):
            if d == 1:
                idx.append("0")
                continue
            e = "offs" if s == 1 else f"(offs // {s})"
            if k > 0:
                e = f"({e} % {d})"
            idx.append(f"i{k}")
            self.lines.append(f"i{k} = {e}")
        self.dom = tuple(idx)

    # -- addressing ---------------------------------------------------------------------------
    def flat(self, idx: Index, shape: tuple[int, ...]) -> str:
        if self.from_offs and traced.same(shape, self.domain) and idx == self.dom:
            return "offs"  # (a caller's own domain tuple, a tiled layout's, has no ``offs`` to stand for it)
        near = self._near_offs(idx, shape)
        if near is not None:
            return near
        terms, strides, k = [], contiguous_strides(shape), 0
        while k < len(idx):
            end = self._run(idx, shape, k)
            if end > k + 1:  # consecutive axes of the domain's own: one index over them, one term
                i = self._merged(int(idx[k][1:]), int(idx[end - 1][1:]))
                k, s = end, strides[end - 1]
            else:
                i, s, k = idx[k], strides[k], k + 1
                if shape[k - 1] == 1 or i == "0":
                    continue
            terms.append(i if s == 1 else f"{i} * {s}")
        return " + ".join(terms) or "0"

    def _run(self, idx: Index, shape: tuple[int, ...], k: int) -> int:
        """The end of the run of the operand's axes from ``k`` that are consecutive axes of the domain read at
        the domain's own indices (``i2, i3``) with the domain's sizes: their address terms add up to one index
        over the merged axes times the last one's stride (a pooling's batch and channel axes: ``offs //
        spatial`` instead of a division and a modulo per axis)."""
        if not self.from_offs or not re.fullmatch(r"i\d+", idx[k]):
            return k + 1
        end, axis = k, int(idx[k][1:])
        while (end < len(idx) and idx[end] == f"i{axis}" and axis < len(self.domain)
               and traced.same(shape[end], self.domain[axis])):
            end, axis = end + 1, axis + 1
        return max(end, k + 1)

    def _merged(self, first: int, last: int) -> str:
        """The index over the domain's axes ``first..last`` taken as one (from the flat offset ``offs``)."""
        name = f"i{first}_{last}"
        if name not in self.merged:
            stride = contiguous_strides(self.domain)[last]
            e = "offs" if stride == 1 else f"(offs // {stride})"
            if first > 0:
                e = f"({e} % {math.prod(self.domain[first:last + 1])})"
            self.lines.append(f"{name} = {e}")
            self.merged.add(name)
        return name

    def _near_offs(self, idx: Index, shape: tuple[int, ...]) -> str | None:
        """The address as ``offs`` itself, shifted by a constant, or modulo the operand's size, when
        ``idx`` is the domain's own index over the operand's trailing dims with constant shifts (rotated
        halves, broadcast tables like rope's cos / sin): contiguous, so Triton keeps 16-byte loads, and no
        per-element division."""
        lead = len(self.domain) - len(shape)
        if not self.from_offs or lead < 0 or not traced.same(tuple(self.domain[lead:]), tuple(shape)):
            return None
        shift = 0
        for e, d, stride, size in zip(idx, self.dom[lead:], contiguous_strides(shape), shape):
            if size == 1:
                continue
            found = _shifted(e)
            if found is None or found[0] != d:
                return None
            shift += found[1] * stride
        base = "offs" if math.prod(self.domain[:lead]) == 1 else f"(offs % {math.prod(shape)})"
        return base if shift == 0 else f"{base} + {shift}" if shift > 0 else f"{base} - {-shift}"

    def unflat(self, flat: str, shape: tuple[int, ...]) -> Index:
        return unflat(flat, shape)

    # -- values -------------------------------------------------------------------------------
    def value(self, n: int, idx: Index, cond: str | None = None) -> str:
        if n not in self.inside:
            cond = self._guard(n, idx, cond)
        key = (n, idx, cond)
        if key in self.memo:
            return self.memo[key]
        node = self.program.nodes[n]
        shape = self.program.concrete_shape(n)
        if node.is_constant:
            return lit(node.attrs["value"])
        if n not in self.inside:  # a program input or another group's output: load it
            if n not in self.reads:
                self.reads.append(n)
            # != 0: a condition on the dims alone (scalars) would make the mask int32 under the interpreter
            mask = "mask" if cond is None else f"(mask & ({cond})) != 0"
            addr = self.flat(idx, shape)
            # an integer tensor is read only as the indices of a gather (emit._integers): kept as integers
            to = "" if node.dtype.kind == "int" else ".to(tl.float32)"
            block = re.search(r"\b(offs|i\d+)\b", addr) or any(
                v not in self.scalar_indices for v in re.findall(r"\bix\w+", addr))
            if not block:  # one element for the whole block: a scalar load
                expr = f"tl.load(p{n}{'' if addr == '0' else ' + ' + addr}){to}"
                if node.dtype.kind == "int":
                    self.scalar_indices.add(f"ix{n}" if idx == self.dom and cond is None else f"ix{n}_{len(self.memo)}")
            else:
                expr = f"tl.load(p{n} + {addr}, mask={mask}, other=1.0){to}"
        else:
            expr = self._compute(n, idx, cond)
        name = f"v{n}" if idx == self.dom and cond is None else f"v{n}_{len(self.memo)}"
        if node.dtype.kind == "int":
            name = "ix" + name[1:]  # an address term (gathers): names the loads and views of indices apart
            if expr in self.scalar_indices:  # a view of a scalar index is one too
                self.scalar_indices.add(name)
        self.lines.append(f"{name} = {expr}")
        self.memo[key] = name
        return name

    def _guard(self, n: int, idx: Index, cond: str | None) -> str | None:
        """The condition a load of ``n`` at ``idx`` needs: none where the read is in bounds for every element
        of the domain (each index a constant 0 or one of the domain's own indices over an axis of the operand's
        size), since its value is discarded where ``cond`` fails (a window position in the padding, a concat's
        other operand): a per-channel bias read at every window position is one load, not one per position."""
        shape = self.program.concrete_shape(n)
        for e, size in zip(idx, shape):
            if e != "0" and (e not in self.dom or self.domain[self.dom.index(e)] != size):
                return cond
        return None

    def _compute(self, n: int, idx: Index, cond: str | None) -> str:
        node = self.program.nodes[n]
        shape = self.program.concrete_shape(n)
        ins = [self.program.concrete_shape(j) for j in node.inputs]
        if node.op in ELEMENTWISE:
            args = [self.value(j, self._broadcast(idx, shape, s), cond) for j, s in zip(node.inputs, ins)]
            return ELEMENTWISE[node.op](args, node.attrs)
        if node.op == "broadcast_to":
            return self.value(node.inputs[0], self._broadcast(idx, shape, ins[0]), cond)
        if node.op == "transpose":
            perm = tuple(attr(self.program, n, "perm"))
            j = [""] * len(perm)
            for k, p in enumerate(perm):
                j[p] = idx[k]
            return self.value(node.inputs[0], tuple(j), cond)
        if node.op in O.flat_views():
            if math.prod(shape) == 1:
                return self.value(node.inputs[0], ("0",) * len(ins[0]), cond)
            return self.value(node.inputs[0], self.unflat(self.flat(idx, shape), ins[0]), cond)
        if node.op == "flip":  # index n - 1 - i along each flipped axis
            j = list(idx)
            for ax in attr(self.program, n, "axes"):
                j[ax] = f"({shape[ax] - 1} - {idx[ax]})" if shape[ax] > 1 else "0"
            return self.value(node.inputs[0], tuple(j), cond)
        if node.op == "slice":
            axis, start, step = (int(attr(self.program, n, k)) for k in ("axis", "start", "step"))
            j = list(idx)
            j[axis] = sliced(idx[axis], start, step)
            return self.value(node.inputs[0], tuple(j), cond)
        if node.op in INDEXING:  # x read at the index tensor's value along axis (clamped into range)
            axis = int(attr(self.program, n, "axis"))
            x, index = node.inputs
            at = self.value(index, idx if node.op == "gather" else (idx[axis],), cond)
            j = list(idx)
            j[axis] = clamped(at, ins[0][axis])
            return self.value(x, tuple(j), cond)
        if node.op in POOLS:
            return self._pool(n, idx, cond)
        if node.op == "causal_mask":  # tril / triu / attention masks: the fill where j - i > diagonal, no load there
            keep = f"(({idx[-1]}) - ({idx[-2]}) <= {int(attr(self.program, n, 'diagonal'))})"
            x = self.value(node.inputs[0], idx, keep if cond is None else f"({cond}) & {keep}")
            return f"tl.where({keep}, {x}, {lit(attr(self.program, n, 'fill'))})"
        if node.op == "concat":
            axis = int(attr(self.program, n, "axis"))
            pieces, offset = [], 0
            for j, s in zip(node.inputs, ins):
                lo, hi = offset, offset + s[axis]
                c = f"({idx[axis]} >= {lo}) & ({idx[axis]} < {hi})"
                sub = list(idx)
                sub[axis] = f"({idx[axis]} - {lo})" if lo else idx[axis]
                pieces.append((c, self.value(j, tuple(sub), c if cond is None else f"({cond}) & {c}")))
                offset = hi
            expr = pieces[-1][1]
            for c, v in reversed(pieces[:-1]):
                expr = f"tl.where({c}, {v}, {expr})"
            return expr
        raise NotLowerable(f"{node.op} has no Triton element-wise lowering")

    def _pool(self, n: int, idx: Index, cond: str | None) -> str:
        """A max / avg pooling output element as its window, unrolled: per window position the input at
        ``o * stride - padding + k * dilation`` along each spatial axis, a load masked where that falls in
        the padding (or past the input, ceil mode) and excluded from the max (-inf) or the sum (0). The avg's
        divisor as torch counts it: the window clipped to the padded input (``count_include_pad``) or to the
        input. Bounds a window position always meets are not tested."""
        node = self.program.nodes[n]
        x = node.inputs[0]
        src, out = self.program.concrete_shape(x), self.program.concrete_shape(n)
        spatial = len(src) - 2
        ks, st, pad = (tuple(attr(self.program, n, a)) for a in ("kernel_size", "stride", "padding"))
        dil = tuple(attr(self.program, n, "dilation")) if node.op.startswith("max") else (1,) * spatial
        if math.prod(ks) > MAX_WINDOW:
            raise NotLowerable(f"{node.op}: a window of {math.prod(ks)} positions (more than {MAX_WINDOW})")
        is_max = node.op.startswith("max")
        fill = "float('-inf')" if is_max else "0.0"
        tag = f"w{n}_{len(self.memo)}"
        acc = None
        for pos in itertools.product(*(range(k) for k in ks)):
            at, tests = list(idx[:2]), []
            for a in range(spatial):
                o, shift = idx[2 + a], pos[a] * dil[a] - pad[a]
                e = o if st[a] == 1 else f"{o} * {st[a]}"
                e = f"({e} + {shift})" if shift > 0 else f"({e} - {-shift})" if shift < 0 else f"({e})"
                if o == "0":  # a size-1 output axis: the position is a number
                    e = str(shift)
                    if not 0 <= shift < src[2 + a]:
                        break
                else:
                    if shift < 0:
                        tests.append(f"({e} >= 0)")
                    if (out[2 + a] - 1) * st[a] + shift >= src[2 + a]:
                        tests.append(f"({e} < {src[2 + a]})")
                at.append(e if src[2 + a] != 1 else "0")
            else:
                inside = " & ".join(tests) or None
                both = inside if cond is None else cond if inside is None else f"({cond}) & {inside}"
                v = self.value(x, tuple(at), both)
                term = v if inside is None else f"tl.where({inside}, {v}, {fill})"
                name = f"{tag}_{len(self.lines)}"
                self.lines.append(f"{name} = {term}" if acc is None else
                                  f"{name} = tl.maximum({acc}, {term})" if is_max else f"{name} = {acc} + {term}")
                acc = name
        if acc is None:
            raise NotLowerable(f"{node.op}: a window wholly in the padding")
        if is_max:
            return acc
        include = bool(attr(self.program, n, "count_include_pad"))
        factors, const = [], 1
        for a in range(spatial):
            o, size, k = idx[2 + a], src[2 + a], ks[a]
            hi = size + pad[a] if include else size
            if o == "0":
                lo_v = -pad[a]
                const *= min(lo_v + k, hi) - (lo_v if include else max(lo_v, 0))
                continue
            start = f"({o} * {st[a]} - {pad[a]})" if pad[a] else f"({o} * {st[a]})"
            clipped_hi = (out[2 + a] - 1) * st[a] - pad[a] + k > hi
            clipped_lo = not include and pad[a] > 0
            if not clipped_hi and not clipped_lo:
                const *= k
                continue
            top = f"tl.minimum({start} + {k}, {hi})" if clipped_hi else f"({start} + {k})"
            bottom = f"tl.maximum({start}, 0)" if clipped_lo else start
            factors.append(f"({top} - {bottom})")
        divisor = " * ".join(([str(const)] if const != 1 or not factors else []) + factors)
        return f"{acc} / ({divisor}).to(tl.float32)" if factors else f"{acc} * {1.0 / const!r}"

    @staticmethod
    def _broadcast(idx: Index, out: tuple[int, ...], arg: tuple[int, ...]) -> Index:
        tail = idx[len(idx) - len(arg):] if arg else ()
        return tuple("0" if a == 1 else i for i, a in zip(tail, arg))


def handles(op: str) -> bool:
    """Whether the emitter computes ``op`` (``_Emitter._compute``'s cases)."""
    return op in ELEMENTWISE or op in INDEX_MAPS or op in ("concat", "causal_mask") or op in POOLS or op in INDEXING


def sliced(index: str, start: int, step: int) -> str:
    """The source index of a slice's element ``index``: start + step * index."""
    return f"({index} * {step} + {start})" if step != 1 else f"({index} + {start})"


def clamped(index: str, size: int) -> str:
    """A gather's index value clamped into the gathered axis (``INDEXING``)."""
    return f"tl.minimum(tl.maximum({index}, 0), {size - 1})" if size > 1 else "0"


INDEX_MAPS = frozenset(O.flat_views()) | {"slice", "transpose", "broadcast_to", "flip"}
"""Layout ops the emitter computes by mapping the index alone (no arithmetic on the values)."""

INDEXING = tuple(op.name for op in O.ops_of_kind(O.OpKind.LAYOUT) if op.meta.get("indices"))  # gather, index_select
"""Ops that read x at the values of an integer index tensor (meta ``indices``, a second input): the emitter
loads the index as an integer and addresses x with it, clamped into x's axis (torch raises on an index out
of range; the kernel reads the nearest end instead of memory past the tensor)."""


def no_fp64(plan: FusionPlan, gi: int) -> None:
    """NotLowerable when the group computes in float64 (every Triton lowering leaves those to torch)."""
    if any(plan.program.nodes[n].dtype.name == "fp64" for n in plan.groups[gi].nodes):
        raise NotLowerable("float64 values stay in torch")


def check(plan: FusionPlan, gi: int, tiling: Tiling | None, warp_size: int | None = None,
          isa: str | None = None) -> bool:
    """NotLowerable with :func:`lower`'s reason when it cannot lower the group, without generating code;
    True (it can: the reasons are float64, outputs of different shapes and an op the emitter lacks, found
    in the order the emitter visits the nodes). :func:`lower` calls it first."""
    program = plan.program
    outs = plan.outputs_of(gi)
    no_fp64(plan, gi)
    domain = program.concrete_shape(outs[0])
    if any(program.concrete_shape(o) != domain for o in outs):
        raise NotLowerable("outputs of different shapes")
    ElementwiseTile.read(tiling)
    computable(plan, gi)
    return True


def computable(plan: FusionPlan, gi: int) -> None:
    """NotLowerable naming the first op of the group the emitter lacks, in the order it visits the nodes
    (depth first from the outputs, inputs in order: ``_Emitter.value``)."""
    program = plan.program
    inside, seen = set(plan.groups[gi].nodes), set()

    def visit(n: int) -> None:
        node = program.nodes[n]
        if n in seen or node.is_constant or n not in inside:
            return
        seen.add(n)
        if not handles(node.op):
            raise NotLowerable(f"{node.op} has no Triton element-wise lowering")
        for j in node.inputs:
            visit(j)

    for o in plan.outputs_of(gi):
        visit(o)


def _unmasked(line: str) -> str:
    """A line of the work without the block mask (a full block): loads and stores lose ``mask=mask`` (and a
    load its ``other``), a load under a condition keeps the condition alone (concats, pooling windows)."""
    line = line.replace(", mask=mask, other=1.0)", ")").replace(", mask=mask)", ")")
    return re.sub(r"mask=\(mask & \(", "mask=((", line)


def lower(plan: FusionPlan, gi: int, tiling: Tiling | None, name: str, warp_size: int | None = None,
          isa: str | None = None) -> GroupKernel:
    program = plan.program
    check(plan, gi, tiling, warp_size, isa)
    outs = plan.outputs_of(gi)
    domain = program.concrete_shape(outs[0])
    total = max(math.prod(domain), 1)
    tile = ElementwiseTile.read(tiling)  # a layout or library-epilogue group's tiling reads the same way
    block, warps = tile.BLOCK, tile.num_warps
    em = _Emitter(plan, gi, domain)
    results = [em.value(o, em.dom) for o in outs]
    reads = tuple(em.reads)
    params = [f"p{n}" for n in reads] + [f"out{k}" for k in range(len(outs))]
    rest = "\n".join(em.lines)
    work = [ln for ln in em.lines  # domain indices that no address or condition uses any more
            if not re.match(r"i\d+ = ", ln) or len(re.findall(rf"\b{ln.split()[0]}\b", rest)) > 1]
    work += [f"tl.store(out{k} + offs, {r}, mask=mask)" for k, r in enumerate(results)]
    body = ["pid = tl.program_id(0)", "offs = pid * BLOCK + tl.arange(0, BLOCK)"]
    full = total // block * block
    if isinstance(total, traced.Traced):  # a run-time size: the full blocks' branch whatever the tail
        body += [f"if pid < {total // block}:", *("    " + _unmasked(ln) for ln in work),
                 "else:", f"    mask = offs < {total}", *("    " + ln for ln in work)]
    elif total % block and full:
        # the full blocks load and store unmasked: 16-byte accesses, which a bound of odd size (the tail's)
        # turns into scalar ones. A mask against a multiple of BLOCK is not enough: LLVM merges the two
        # branches when they differ only in the bound, and the merged code is scalar (measured on the
        # H200: LeakyReLU over 16381 x 12007 fp32, 735 us merged against 384 us unmasked at BLOCK 8192)
        body += [f"if pid < {full // block}:", *("    " + _unmasked(ln) for ln in work),
                 "else:", f"    mask = offs < {total}", *("    " + ln for ln in work)]
    else:
        body += [f"mask = offs < {total}", *work]
    src = "@triton.jit\ndef {}({}, BLOCK: tl.constexpr):\n{}\n".format(
        name, ", ".join(params), "\n".join("    " + ln for ln in body))
    grid = cdiv(total, block)
    ops = sorted({program.nodes[n].op for n in plan.groups[gi].nodes})
    return GroupKernel(name, src, reads, tuple(outs), grid, (("BLOCK", block),), warps,
                       resources(name, block, warps, grid, max(2, len(reads) + len(outs)), warp_size=warp_size),
                       f"element-wise {'/'.join(ops)} over {list(domain)}: BLOCK={block}, num_warps={warps}, "
                       f"{grid} programs",
                       grid_meta=f"triton.cdiv({total}, META['BLOCK'])", tiling_keys=(("BLOCK", "BLOCK"),))
