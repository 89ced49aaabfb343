"""Scan groups (``cumsum``, ``cumprod`` with their element-wise producers and consumers) as one Triton kernel.

The scan's tensor is seen as ``OUTER x L x INNER`` (``L`` the scanned axis). Each program owns a set
of independent lines and walks along ``L`` in chunks, fp32 throughout: ``tl.cumsum`` scans a chunk
inside the block (``tl.cumprod`` for a product), and a running ``carry`` per line (the last element of
the previous chunk's inclusive scan) is added to (multiplies) the next chunk, so a line of any length
is one sweep over HBM. Two tile shapes, both with the memory-contiguous axis as the tile's last
(fastest) axis, so loads and stores coalesce:

* the scanned axis is innermost (``INNER == 1``): a ``[ROWS, CHUNK]`` tile, ``ROWS`` lines per
  program, the scan along tile axis 1 (warp shuffles, then shared memory across warps);
* otherwise: a ``[CHUNK, COLS]`` tile of ``COLS`` neighbouring inner columns of one outer index, the
  scan along tile axis 0 (mostly inside each thread's registers).

Every value of the group is computed at an index tuple over the scan's shape (the element-wise
lowering's index maps: broadcasts, transposes, slices, concats and views on load); the scanned
values themselves must be read at the tile's own index. Several scans along the same axis (a cumsum
of a cumsum) share the sweep, each with its own carry (a product's carry multiplies: ``_SCANS``).

Few long lines along the last axis (fewer lines than SMs) leave most SMs idle in one sweep per line; two
tilings cut each line across programs (``ScanTile``): ``SPLIT`` segments in two launches, a fold of each
segment then a sweep from the earlier segments' fold (``_split_lower``: the input read twice, deterministic),
or ``LOOKBACK``, one tile per program in one launch, the earlier tiles' fold found by a decoupled look-back
(``_lookback_lower``: the input read once).

Tile sizes: the planner hands scan groups the element-wise ``BLOCK`` (elements per chunk tile) and
``num_warps`` (``extract.templates.ScanTile``, whose ``split`` this is). Rows: ``CHUNK = min(L, BLOCK)``,
``ROWS = BLOCK / CHUNK``. Columns: ``COLS`` up to 64, narrowed to 16 until there are ``TARGET_PROGRAMS``
strips (each program sweeps its strip alone, so few strips leave SMs idle), ``CHUNK = BLOCK / COLS``.
``CHUNK`` and ``LINES`` (rows or columns per program) in the tiling override the split. Measured on an
H200 (Triton 3.6, bf16 4096 x 4096): about 3 TB/s scanning rows, 1.0-1.4 TB/s scanning columns, against
0.4 and 0.04 TB/s for ``torch.cumsum``.
"""

from __future__ import annotations

import math

from axon_eg.extract.fusion import FusionPlan
from axon_eg.extract.templates import Tiling
from axon_eg.ir import ops as O
from axon_eg.ir import traced

from .base import INT32_LIMIT, GroupKernel, NotLowerable, attr, cdiv, contiguous_strides, resources
from .elementwise import Index, _Emitter, handles
from .templates import ScanTile
from .tl_expressions import ELEMENTWISE

_FLAT_VIEWS = O.flat_views()


def _pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def _digits(flat: str, shape: tuple[int, ...], first: int) -> dict[int, str]:
    """Index expressions of the dims of ``shape`` (numbered from ``first``) from their flat index."""
    out: dict[int, str] = {}
    for k, (d, s) in enumerate(zip(shape, contiguous_strides(shape))):
        if d == 1:
            continue
        e = flat if s == 1 else f"({flat} // {s})"
        out[first + k] = e if k == 0 else f"({e} % {d})"
    return out


_SCANS = {"cumsum": ("cumsum", "0.0", "+"), "cumprod": ("cumprod", "1.0", "*")}
"""Scan op -> (its tl function, the neutral element masked lanes and the first carry hold, the operator
that folds the carry (the line's running result before the chunk) into the chunk's scan)."""


class _Sweep(_Emitter):
    """The element-wise emitter over a 2-D tile whose chunk loop runs along the scanned axis."""

    def __init__(self, plan: FusionPlan, gi: int, domain: tuple[int, ...], dom: Index, looped: bool, scan_axis: int,
                 carry_index: str, lookback: bool = False):
        super().__init__(plan, gi, domain, dom)
        self.looped = looped
        self.lookback = lookback  # the carry comes from the earlier tiles' look-back (``_lookback_lower``)
        self.scan_axis = scan_axis  # the tile axis tl.cumsum runs along
        self.carry_index = carry_index  # the carry's tl.sum drops the scanned tile axis; this puts it back
        self.carries: list[tuple[str, str]] = []  # (name, initial value)

    def value(self, n: int, idx: Index, cond: str | None = None) -> str:
        node = self.program.nodes[n]
        if n not in self.inside or O.get(node.op).kind is not O.OpKind.SCAN:
            return super().value(n, idx, cond)
        if idx != self.dom or cond is not None:
            raise NotLowerable(f"{node.op} result {n} is read through an index map (broadcast, transpose, slice) "
                               "inside the scan group")
        key = (n, idx, cond)
        if key in self.memo:
            return self.memo[key]
        x = self.value(node.inputs[0], idx)
        name = f"v{n}"
        fn, neutral, combine = _SCANS[node.op]
        # masked lanes (past the line's end, or rows past the last line) leave the scan as it is
        self.lines.append(f"{name} = tl.{fn}(tl.where(mask, {x}, {neutral}), axis={self.scan_axis})")
        if self.lookback:  # the tile's total published, the earlier tiles' fold looked back for, then applied
            self.lines += _lookback(n, node.op, f"tl.sum(tl.sum(tl.where(lane == CHUNK - 1, {name}, 0.0), axis=1), axis=0)")
            self.lines.append(f"{name} = {name} {combine} carry{n}")
        elif self.looped:
            carry = f"carry{n}"
            self.carries.append((carry, neutral))
            self.lines.append(f"{name} = {name} {combine} {carry}")
            # the chunk's last lane holds the line's running total (exact: one nonzero term in the sum)
            self.lines.append(f"{carry} = tl.sum(tl.where(lane == CHUNK - 1, {name}, 0.0), "
                              f"axis={self.scan_axis}){self.carry_index}")
        self.memo[key] = name
        return name


def _check(plan: FusionPlan, gi: int) -> tuple[tuple[int, ...], int, list[int]]:
    """The scans' common shape and axis, and the group's outputs (all of that shape)."""
    program = plan.program
    group = plan.groups[gi]
    if any(program.nodes[n].dtype.name == "fp64" for n in group.nodes):
        raise NotLowerable("float64 values stay in torch")
    scans = [n for n in group.nodes if O.get(program.nodes[n].op).kind is O.OpKind.SCAN]
    if not scans:
        raise NotLowerable("no scan in the group")
    for n in scans:
        if program.nodes[n].op not in _SCANS:
            raise NotLowerable(f"{program.nodes[n].op} has no Triton scan lowering")
    domain = tuple(program.concrete_shape(scans[-1]))
    axis = int(attr(program, scans[-1], "axis"))
    if not domain:
        raise NotLowerable(f"{program.nodes[scans[-1]].op} of a scalar")
    for n in scans:
        shape, ax = tuple(program.concrete_shape(n)), int(attr(program, n, "axis"))
        if shape != domain or ax != axis:
            raise NotLowerable(f"a scan over axis {ax} of {list(shape)} and over axis {axis} of {list(domain)} "
                               "cannot share one sweep")
    return domain, axis, plan.outputs_of(gi)


def _flat_source(plan: FusionPlan, gi: int, o: int, domain: tuple[int, ...], axis: int) -> tuple[int, bool]:
    """The value of the scan's shape whose row-major elements output ``o`` holds: ``o`` itself, or what
    a chain of reshapes / expand_dims / squeezes inside the group views (they keep the flat order); and
    whether ``o`` holds them reversed along the scanned axis (flips along it inside the group, an odd number:
    a reverse scan's last flip, ``fusion._absorb_flips``), which the sweep's store undoes."""
    program = plan.program
    n, flipped = o, False
    while True:
        node = program.nodes[n]
        if (n in plan.groups[gi].nodes and node.op == "flip" and tuple(program.concrete_shape(n)) == domain
                and tuple(node.attrs["axes"]) == (axis,)):
            n, flipped = node.inputs[0], not flipped
            continue
        if tuple(program.concrete_shape(n)) == domain:
            return n, flipped
        if n not in plan.groups[gi].nodes or node.op not in _FLAT_VIEWS:
            raise NotLowerable(f"output {o} ({program.nodes[o].op}) of shape {list(program.concrete_shape(o))} "
                               f"is not the scan's shape {list(domain)}")
        n = node.inputs[0]


def _own_index(domain: tuple[int, ...], axis: int) -> Index:
    """The sweep's own index over the scan's shape (``lower``'s ``dom``): ``i<k>`` along the scanned axis and
    every dim of size above 1, ``0`` along the others."""
    return tuple(f"i{k}" if k == axis or d != 1 else "0" for k, d in enumerate(domain))


def _scans_at_own_index(plan: FusionPlan, gi: int, domain: tuple[int, ...], axis: int, outs: list[int]) -> bool:
    """Walks the group as ``_Sweep.value`` does (outputs in order, depth first, inputs in order), tracking
    only whether a value is read at the sweep's own index ``dom`` (exactly: broadcasts and transposes
    applied to ``dom``) or at some other index (after a view, slice or concat, or a broadcast / transpose
    that moves it). NotLowerable, with the emitter's reason, at the first op it lacks; False as soon as
    a scan is reached at another index (the lowering may refuse it there, or map the index back to its
    own: only lowering tells), True when every scan is read at ``dom`` (the lowering cannot refuse)."""
    program = plan.program
    inside = set(plan.groups[gi].nodes)
    dom = _own_index(domain, axis)
    seen: set[tuple[int, bool]] = set()

    def visit(n: int, own: bool) -> bool:
        node = program.nodes[n]
        if (n, own) in seen or node.is_constant or n not in inside:
            return True
        seen.add((n, own))
        if O.get(node.op).kind is O.OpKind.SCAN:
            return own and visit(node.inputs[0], True)
        if not handles(node.op):
            raise NotLowerable(f"{node.op} has no Triton element-wise lowering")
        ins = [tuple(program.concrete_shape(j)) for j in node.inputs]
        for j, s in zip(node.inputs, ins):
            at = own
            if own and (node.op in ELEMENTWISE or node.op == "broadcast_to"):
                at = _Emitter._broadcast(dom, domain, s) == dom
            elif own and node.op == "transpose":
                perm, moved = tuple(attr(program, n, "perm")), [""] * len(dom)
                for k, q in enumerate(perm):
                    moved[q] = dom[k]
                at = tuple(moved) == dom
            elif own:  # views go through the flat index, slices shift it, concats add a condition
                at = False
            if not visit(j, at):
                return False
        return True

    for o in outs:
        if not visit(_flat_source(plan, gi, o, domain, axis)[0], True):
            return False
    return True


def _stores(results: list[str], sources: list[tuple[int, bool]], back: str) -> tuple[list[str], list[str]]:
    """The lines binding a reversed output's offsets (``back``; none when no output is reversed) and the
    stores of the group's outputs, each at ``offs`` or, reversed along the scanned axis, at ``back``."""
    bind = [f"back = {back}  # a reversed output's offsets (a reverse scan's last flip)"] if any(f for _, f in sources) else []
    return bind, [f"tl.store(out{k} + {'back' if f else 'offs'}, {r}, mask=mask)"
                  for k, (r, (_, f)) in enumerate(zip(results, sources))]


def _split_check(plan: FusionPlan, gi: int, domain: tuple[int, ...], axis: int, what: str = "split scan") -> None:
    """NotLowerable unless the group can be a split (or look-back) scan: lines along the last axis, one scan in
    the group."""
    program = plan.program
    scans = [n for n in plan.groups[gi].nodes if O.get(program.nodes[n].op).kind is O.OpKind.SCAN]
    if axis != len(domain) - 1:
        raise NotLowerable(f"{what}: along axis {axis} of {list(domain)}, not the last (column strips fill the GPU)")
    if len(scans) != 1:
        raise NotLowerable(f"{what}: {len(scans)} scans in one group (a segment's total is one scan's)")


def _split_lower(plan: FusionPlan, gi: int, tile: ScanTile, name: str, domain: tuple[int, ...], axis: int,
                 outs: list[int], chunk: int, lines: int, warp_size: int | None) -> GroupKernel:
    """Few long lines: each line cut into ``SPLIT`` segments of whole chunks, two launches. ``{name}_part``
    folds each segment's scanned values (sum, or product) into one fp32 partial per line and segment;
    ``{name}_scan`` sweeps each segment again, its carry starting at the fold of the line's earlier segments'
    partials (in segment order, deterministic), and stores. The input is read twice, by ``SPLIT`` times as many
    programs as lines; the host function allocates the partials and launches both."""
    program = plan.program
    _split_check(plan, gi, domain, axis)
    outer, length = math.prod(domain[:axis]), domain[axis]
    split, warps = tile.SPLIT, tile.num_warps
    seg = math.ceil(math.ceil(length / chunk) / split) * chunk  # elements per segment, whole chunks
    wide = math.prod(domain) >= INT32_LIMIT or any(
        math.prod(program.concrete_shape(j)) >= INT32_LIMIT for j in plan.inputs_of(gi))
    to64 = ".to(tl.int64)" if wide else ""
    scan = next(n for n in plan.groups[gi].nodes if O.get(program.nodes[n].op).kind is O.OpKind.SCAN)
    fn, neutral, combine = _SCANS[program.nodes[scan].op]
    head = ["pid = tl.program_id(0) // SPLIT  # the block of lines",
            f"seg = (tl.program_id(0) % SPLIT){to64}  # its segment",
            f"rows = (pid * ROWS + tl.arange(0, ROWS)){to64}[:, None]  # one scanned line per row",
            f"rmask = rows < {outer}", f"lane = tl.arange(0, CHUNK)[None, :]{to64}"]
    digits = _digits("rows", domain[:axis], 0)
    head += [f"i{k} = {e}" for k, e in sorted(digits.items())]
    dom = tuple(f"i{k}" if k == axis or k in digits else "0" for k in range(len(domain)))
    step = [f"i{axis} = seg * {seg} + c0 + lane", f"mask = rmask & (c0 + lane < {seg}) & (i{axis} < {length})",
            f"offs = rows * {length} + i{axis}"]
    loop = f"for c0 in range(0, {seg}, CHUNK):  # the segment's chunks"
    # the partials: the scanned values of the segment folded (its sum, or product), lane-wise then across
    one = _Sweep(plan, gi, domain, dom, False, 1, "[:, None]")
    x = one.value(program.nodes[scan].inputs[0], one.dom)
    fold = f"acc {combine} tl.where(mask, {x}, {neutral})"
    part_body = head + [f"acc = tl.full([ROWS, CHUNK], {neutral}, tl.float32)", loop]
    part_body += ["    " + ln for ln in step + one.lines + [f"acc = {fold}"]]
    total = "tl.sum(acc, axis=1)" if fn == "cumsum" else "tl.reduce(acc, 1, _mul)"
    part_body += [f"tl.store(part + rows * SPLIT + seg, {total}[:, None], mask=rmask)"]
    # the sweep: the carry starts at the earlier segments' partials, folded in segment order
    em = _Sweep(plan, gi, domain, dom, True, 1, "[:, None]")
    sources = [_flat_source(plan, gi, o, domain, axis) for o in outs]
    results = [em.value(n, em.dom) for n, _ in sources]
    carries = [f"{c} = tl.full([ROWS, 1], {init}, tl.float32)" for c, init in em.carries]
    carry = em.carries[0][0]
    carries += ["for s in tl.static_range(SPLIT):  # the line's earlier segments, in order",
                "    before = (rows * 0 + s) < seg  # a [ROWS, 1] boolean (a scalar condition would not be a mask)",
                f"    {carry} = {carry} {combine} tl.load(part + rows * SPLIT + s, mask=rmask & before, other={neutral})"]
    reversed_out, stores = _stores(results, sources, f"rows * {length} + {length - 1} - i{axis}")
    scan_body = head + carries + [loop] + ["    " + ln for ln in step + reversed_out + em.lines + stores]
    reads = tuple(em.reads)
    params = [f"p{n}" for n in reads] + [f"out{k}" for k in range(len(outs))] + ["part"]
    consts = (("ROWS", lines), ("CHUNK", chunk), ("SPLIT", split))

    def jit(fn_name: str, body: list[str]) -> str:
        return "@triton.jit\ndef {}({}):\n{}\n".format(
            fn_name, ", ".join(params + [f"{c}: tl.constexpr" for c, _ in consts]), "\n".join("    " + ln for ln in body))

    grid = cdiv(outer, lines) * split
    kw = ", ".join(f"{c}={v}" for c, v in consts)
    args = ", ".join(params)
    helper = "@triton.jit\ndef _mul(a, b):\n    return a * b\n\n\n" if fn == "cumprod" else ""
    host = f'''def {name}({", ".join(params[:-1])}, **launch):
    """Both launches of the split scan; ``launch``: vendor launch knobs (Intel XPU grf_mode, warp_size)."""
    part = torch.empty(({outer}, {split}), dtype=torch.float32, device=out0.device)
    {name}_part[({grid},)]({args}, {kw}, num_warps={warps}, **launch)
    {name}_scan[({grid},)]({args}, {kw}, num_warps={warps}, **launch)
'''
    src = helper + jit(f"{name}_part", part_body) + "\n\n" + jit(f"{name}_scan", scan_body) + "\n\n" + host
    ops = sorted({program.nodes[n].op for n in plan.groups[gi].nodes})
    note = (f"scan {'/'.join(ops)} along axis {axis} of {list(domain)}, split: SPLIT={split} segments of {seg} per "
            f"line, [ROWS, CHUNK] tiles (ROWS={lines}, CHUNK={chunk}), num_warps={warps}, {grid} programs fold their "
            f"segments, then {grid} sweep them from the earlier segments' partials")
    return GroupKernel(name, src, reads, tuple(outs), grid, consts, warps,
                       resources(f"{name}_scan", chunk * lines, warps, grid, max(2, len(reads) + len(outs)),
                                 smem_bytes=lines * warps * 8, warp_size=warp_size), note, host=True)


LOOKBACK_WINDOW = 32
"""Earlier tiles a look-back reads at once (one warp's worth of flags, as CUB's look-back reads them)."""


def _lookback(n: int, op: str, total: str) -> list[str]:
    """Lines of a decoupled look-back (Merrill and Garland, 2016) for scan ``n``: the tile publishes its total
    (flag 1; a line's first tile publishes it as the inclusive prefix, flag 2), folds the earlier tiles'
    words in windows of ``LOOKBACK_WINDOW``, nearest first, until one holds its line's inclusive prefix,
    into ``carry{n}``, then publishes ``carry combine total`` with flag 2. A word packs the fp32 value's bits
    (low half) with its flag (high half), so one 64-bit atomic publishes both: no fence between them. A
    window with an unpublished tile (flag 0) before its nearest prefix is read again (the spin). Earlier
    tiles hold earlier tickets (``_lookback_lower``): they are running or done, so the spin ends."""
    _, neutral, combine = _SCANS[op]
    fold = "tl.sum({}, axis=0)" if op == "cumsum" else "tl.reduce({}, 0, _mul)"
    word = "{}.to(tl.uint32, bitcast=True).to(tl.int64) | ({} << 32)"
    return [
        f"agg{n} = {total}  # the tile's total (the last lane: masked lanes hold the neutral element)",
        "tl.atomic_xchg(slot_lb + t_lb, " + word.format(f"agg{n}", "(1 + (t_lb == 0).to(tl.int64))") + ', sem="relaxed")',
        f"carry{n} = agg{n} * 0.0 + {neutral}  # the fold of the line's earlier tiles",
        "hi_lb = t_lb - 1  # the nearest earlier tile not folded yet",
        "while hi_lb >= 0:",
        "    at_lb = hi_lb - win_lb",
        "    ok_lb = at_lb >= 0",
        '    w_lb = tl.atomic_add(slot_lb + at_lb, 0, mask=ok_lb, sem="relaxed")',
        "    flag_lb = tl.where(ok_lb, w_lb >> 32, 2)",
        f"    val_lb = tl.where(ok_lb, (w_lb & 0xFFFFFFFF).to(tl.uint32).to(tl.float32, bitcast=True), {neutral})",
        "    first_lb = tl.min(tl.where(flag_lb == 2, win_lb, LOOKBACK_WINDOW), axis=0)  # the nearest inclusive prefix",
        "    if tl.sum(tl.where((flag_lb == 0) & (win_lb <= first_lb), 1, 0), axis=0) == 0:  # all published up to it",
        f"        carry{n} = carry{n} {combine} " + fold.format(f"tl.where(win_lb <= first_lb, val_lb, {neutral})"),
        "        hi_lb = tl.where(first_lb < LOOKBACK_WINDOW, -1, hi_lb - LOOKBACK_WINDOW)",
        "tl.atomic_xchg(slot_lb + t_lb, " + word.format(f"(carry{n} {combine} agg{n})", "2") + ', sem="relaxed")',
    ]


def _lookback_lower(plan: FusionPlan, gi: int, tile: ScanTile, name: str, domain: tuple[int, ...], axis: int,
                    outs: list[int], chunk: int, warp_size: int | None) -> GroupKernel:
    """Few long lines, one pass: one ``CHUNK`` of one line per program, its line and place taken from a ticket
    (an atomic counter, so that tickets follow the order programs start in and a look-back never waits on a
    program that has not started); the tile is loaded once, scanned, its total published, the earlier tiles'
    fold found by a decoupled look-back (:func:`_lookback`), applied, and stored. The input is read once and the
    output written once; the host function zeroes the scratch (the ticket and one word per tile) and launches.
    The fold's order of additions depends on which tiles have published their prefix: results may differ in
    the last bits from run to run (a sum's rounding, not its value)."""
    program = plan.program
    _split_check(plan, gi, domain, axis, "look-back scan")
    outer, length = math.prod(domain[:axis]), domain[axis]
    tiles = cdiv(length, chunk)
    warps = tile.num_warps
    scan_node = next(n for n in plan.groups[gi].nodes if O.get(program.nodes[n].op).kind is O.OpKind.SCAN)
    head = ["tid_lb = tl.atomic_add(scratch, 1)  # a ticket: tiles in the order programs start",
            "line_lb = tid_lb // TILES", "t_lb = tid_lb % TILES",
            "slot_lb = scratch + 1 + line_lb * TILES  # the line's words, one per tile",
            "win_lb = tl.arange(0, LOOKBACK_WINDOW)",
            "rows = line_lb + tl.arange(0, 1)[:, None]  # the tile's line, as a [1, 1] row",
            f"rmask = rows < {outer}", "lane = tl.arange(0, CHUNK)[None, :].to(tl.int64)"]
    digits = _digits("rows", domain[:axis], 0)
    head += [f"i{k} = {e}" for k, e in sorted(digits.items())]
    dom = tuple(f"i{k}" if k == axis or k in digits else "0" for k in range(len(domain)))
    em = _Sweep(plan, gi, domain, dom, False, 1, "[:, None]", lookback=True)
    sources = [_flat_source(plan, gi, o, domain, axis) for o in outs]
    results = [em.value(m, em.dom) for m, _ in sources]
    reversed_out, stores = _stores(results, sources, f"rows * {length} + {length - 1} - i{axis}")
    step = [f"i{axis} = t_lb * CHUNK + lane", f"mask = rmask & (i{axis} < {length})", f"offs = rows * {length} + i{axis}",
            *reversed_out]
    body = head + step + em.lines + stores
    reads = tuple(em.reads)
    params = [f"p{m}" for m in reads] + [f"out{k}" for k in range(len(outs))] + ["scratch"]
    consts = (("CHUNK", chunk), ("TILES", tiles), ("LOOKBACK_WINDOW", LOOKBACK_WINDOW))
    fn = program.nodes[scan_node].op
    helper = "@triton.jit\ndef _mul(a, b):\n    return a * b\n\n\n" if fn == "cumprod" else ""
    kernel = "@triton.jit\ndef {}_lookback({}):\n{}\n".format(
        name, ", ".join(params + [f"{c}: tl.constexpr" for c, _ in consts]), "\n".join("    " + ln for ln in body))
    grid = outer * tiles
    kw = ", ".join(f"{c}={v}" for c, v in consts)
    host = f'''def {name}({", ".join(params[:-1])}, **launch):
    """The look-back scan: its scratch zeroed (the ticket, then one word per tile), one launch; ``launch``:
    vendor launch knobs (Intel XPU grf_mode, warp_size)."""
    scratch = torch.zeros(({1 + grid},), dtype=torch.int64, device=out0.device)
    {name}_lookback[({grid},)]({", ".join(params)}, {kw}, num_warps={warps}, **launch)
'''
    src = helper + kernel + "\n\n" + host
    ops = sorted({program.nodes[m].op for m in plan.groups[gi].nodes})
    note = (f"scan {'/'.join(ops)} along axis {axis} of {list(domain)}, decoupled look-back: {grid} programs, one "
            f"[1, CHUNK] tile each (CHUNK={chunk}, {tiles} per line), num_warps={warps}, the input read once")
    return GroupKernel(name, src, reads, tuple(outs), grid, consts, warps,
                       resources(f"{name}_lookback", chunk, warps, grid, max(2, len(reads) + len(outs)),
                                 smem_bytes=warps * 8, warp_size=warp_size), note, host=True)


def check(plan: FusionPlan, gi: int, tiling: Tiling | None, warp_size: int | None = None,
          isa: str | None = None) -> bool:
    """NotLowerable with :func:`lower`'s reason, without generating code: float64, no scan, scans other than
    cumsum and cumprod, of a scalar, or of different shapes or axes, the tiling's kind, an output that is no view of
    the scan's shape, an op the element-wise emitter lacks; True when every scan is read at the sweep's
    own index (``_scans_at_own_index``), False when one is read through an index map (only the lowering's
    index expressions tell whether that map is the identity). :func:`lower` calls it first."""
    domain, axis, outs = _check(plan, gi)
    tile = ScanTile.read(tiling)
    tile.split(traced.concrete(domain), axis)
    if tile.SPLIT > 1 or tile.LOOKBACK:
        _split_check(plan, gi, domain, axis, "look-back scan" if tile.LOOKBACK else "split scan")
    return _scans_at_own_index(plan, gi, domain, axis, outs)


def lower(plan: FusionPlan, gi: int, tiling: Tiling | None, name: str, warp_size: int | None = None,
          isa: str | None = None) -> GroupKernel:
    """One sweep along the scanned axis per program, fused producers and consumers computed in the tile."""
    program = plan.program
    check(plan, gi, tiling, warp_size, isa)
    domain, axis, outs = _check(plan, gi)
    outer, length, inner = math.prod(domain[:axis]), domain[axis], math.prod(domain[axis + 1:])
    columns = inner > 1
    tile = ScanTile.read(tiling)
    chunk, lines, _ = tile.split(traced.concrete(domain), axis)  # a tiling choice: any split is right
    warps = tile.num_warps
    if tile.SPLIT > 1:
        return _split_lower(plan, gi, tile, name, domain, axis, outs, chunk, lines, warp_size)
    if tile.LOOKBACK:
        return _lookback_lower(plan, gi, tile, name, domain, axis, outs, chunk, warp_size)
    looped = chunk < length
    wide = math.prod(domain) >= INT32_LIMIT or any(
        math.prod(program.concrete_shape(j)) >= INT32_LIMIT for j in plan.inputs_of(gi))
    # 64-bit offsets only where an int32 one could overflow: they cost registers and address arithmetic
    to64 = ".to(tl.int64)" if wide else ""
    head = [f"pid = tl.program_id(0){to64}"]
    digits: dict[int, str] = {}
    if columns:
        blocks = cdiv(inner, lines)
        grid = outer * blocks
        if outer > 1:  # a [1, 1] tensor, so that conditions on outer indices (a concat along them) combine with masks
            head.append(f"outer = {f'pid // {blocks}' if blocks > 1 else 'pid'} + tl.zeros([1, 1], tl.int32)")
        head += [f"cols = {f'(pid % {blocks}) * COLS + ' if blocks > 1 else ''}tl.arange(0, COLS)[None, :]",
                 f"cmask = cols < {inner}",
                 f"lane = tl.arange(0, CHUNK)[:, None]{to64}"]
        digits.update(_digits("outer", domain[:axis], 0))
        digits.update(_digits("cols", domain[axis + 1:], axis + 1))
        offs = " + ".join(([f"outer * {length * inner}"] if outer > 1 else []) + [f"i{axis} * {inner}", "cols"])
        back = offs.replace(f"i{axis} * {inner}", f"({length - 1} - i{axis}) * {inner}")
        line_mask, tile, scan_axis, carry_shape, carry_index = "cmask", "[CHUNK, COLS]", 0, "[1, COLS]", "[None, :]"
        consts = (("CHUNK", chunk), ("COLS", lines))
    else:
        grid = cdiv(outer, lines)
        head += ["rows = pid * ROWS + tl.arange(0, ROWS)[:, None]  # one scanned line per row",
                 f"rmask = rows < {outer}",
                 f"lane = tl.arange(0, CHUNK)[None, :]{to64}"]
        digits.update(_digits("rows", domain[:axis], 0))
        offs = f"rows * {length} + i{axis}"  # a [ROWS, CHUNK] tile even for one line: tl.store wants full pointers
        back = f"rows * {length} + {length - 1} - i{axis}"
        line_mask, tile, scan_axis, carry_shape, carry_index = "rmask", "[ROWS, CHUNK]", 1, "[ROWS, 1]", "[:, None]"
        consts = (("ROWS", lines), ("CHUNK", chunk))
    for k, e in sorted(digits.items()):
        head.append(f"i{k} = {e}")
    dom = tuple(f"i{k}" if k == axis or k in digits else "0" for k in range(len(domain)))
    em = _Sweep(plan, gi, domain, dom, looped, scan_axis, carry_index)
    sources = [_flat_source(plan, gi, o, domain, axis) for o in outs]
    results = [em.value(n, em.dom) for n, _ in sources]
    reversed_out, stores = _stores(results, sources, back)
    step = [f"i{axis} = c0 + lane" if looped else f"i{axis} = lane",
            f"mask = {line_mask} & (i{axis} < {length})",
            f"offs = {offs}",
            *reversed_out,
            *em.lines,
            *stores]
    if looped:
        head += [f"{c} = tl.full({carry_shape}, {init}, tl.float32)" for c, init in em.carries]
        body = head + [f"for c0 in range(0, {length}, CHUNK):  # chunks along the scanned axis, carry between them"]
        body += ["    " + ln for ln in step]
    else:
        body = head + step
    reads = tuple(em.reads)
    params = [f"p{n}" for n in reads] + [f"out{k}" for k in range(len(outs))]
    params += [f"{c}: tl.constexpr" for c, _ in consts]
    src = "@triton.jit\ndef {}({}):\n{}\n".format(name, ", ".join(params), "\n".join("    " + ln for ln in body))
    block = chunk * lines
    # shared memory: tl.cumsum and the carry's tl.sum exchange one fp32 partial per warp and line
    smem = lines * warps * 4 * (2 if looped else 1)
    ops = sorted({program.nodes[n].op for n in plan.groups[gi].nodes})
    sweep = f"{cdiv(length, chunk)} chunks with a carry" if looped else "one chunk"
    return GroupKernel(name, src, reads, tuple(outs), grid, consts, warps,
                       resources(name, block, warps, grid, max(2, len(reads) + len(outs)), smem_bytes=smem,
                                 warp_size=warp_size),
                       f"scan {'/'.join(ops)} along axis {axis} of {list(domain)}: {tile} tiles "
                       f"({', '.join(f'{c}={v}' for c, v in consts)}), num_warps={warps}, {sweep}, {grid} programs")
