"""Candidate -> one readable Triton kernel file.

The file has a header that states the variant (rules whose e-nodes it uses, fusion groups with their
tiling and lowering, predicted cost), one ``@triton.jit`` function per group a Triton lowering handles
(``LOWERINGS``: element-wise, layout, row-reduction, scan, matmul with its prologue and epilogue, GEMV /
split-K, attention), and a launcher ``kernel(*inputs, *outputs)`` (destination passing) that allocates
intermediates, computes grids and launches the groups in order. The launcher first checks its arguments
against what the file was built for (count, shapes, dtypes, one device, contiguous row-major;
``SIGNATURE`` and ``check_call`` in the header, from :mod:`axon_eg.backends.kernel`) and raises the
file's ``KernelCallError`` (a ValueError) naming the argument. A group no lowering takes (a library op
such as a cuBLAS GEMM or a convolution, float64 values, a shape a lowering refuses with ``NotLowerable``)
runs as torch code from the torch lowering of the same registry ops, and the header says why; a library
group's element-wise tail still gets a Triton epilogue kernel (``_split_library``).
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from axon_eg.backends.kernel import Kernel, call_signature, guard_source, identifier, shape_generic
from axon_eg.backends.torch.lower import expr as torch_expr
from axon_eg.backends.triton.isa import NHWC, SDPA, WINDOW, is_blas
from axon_eg.extract.fusion import (
    ATTENTION,
    ELEMENTWISE,
    LAYOUT,
    LIBRARY,
    MATMUL,
    REDUCTION,
    SCAN,
    FusionPlan,
    Group,
    node_kind,
    viewed_output_source,
    window_reader,
)
from axon_eg.extract.templates import GpuTile, knobs
from axon_eg.extract.tiling import rank_tilings
from axon_eg.hw import HardwareSpec
from axon_eg.ir import dims as D
from axon_eg.ir import ops as O
from axon_eg.ir import traced
from axon_eg.ir.library_ops import CONV_FAMILIES

from . import attention, blas, conv_nhwc, elementwise, layout, matmul, reduction, scan, sdpa, tma
from .base import GroupKernel, NotLowerable, attr
from .cost import group_seconds
from .templates import TEMPLATES, ElementwiseTile

if TYPE_CHECKING:  # annotations only: the enumerator (and the e-graph it loads) is not needed to emit
    from axon_eg.extract.candidates import Candidate

LOWERINGS = {ELEMENTWISE: elementwise, LAYOUT: layout, REDUCTION: reduction, MATMUL: matmul, ATTENTION: attention,
             SCAN: scan}
"""Fusion-group kind -> its lowering module: ``lower(plan, gi, tiling, name, warp_size, isa)`` returns the
GroupKernel or raises NotLowerable with the reason; ``check(plan, gi, tiling, warp_size, isa)`` raises the
same NotLowerable for what it can decide without generating code and returns True when that decides the
group lowers, False when only lowering it tells (``lower`` calls ``check`` first, so the two cannot
disagree on those reasons). Library groups: torch for the library op, then the element-wise epilogue
(``_split_library``). Each lowering reads the tiling as its tile template (``extract/templates``:
``ElementwiseTile.read(tiling).BLOCK``, ...); ``warp_size`` None is the default target's (``templates.knobs``).
The functions are looked up on the modules at each call."""


INTEGERS = ("integer values stay in torch: the Triton kernels compute in fp32, exact for integers only below "
            "2**24 (booleans, 0 and 1, are fine)")


def _integers(plan: FusionPlan, gi: int) -> bool:
    """Whether group ``gi`` computes or reads an int32 / int64 value other than as addresses: the index of a
    gather / index_select (``elementwise.INDEXING``), read from another group's output or an input, through
    index maps inside the group at most (views, slices, transposes, broadcasts, flips), is loaded as an
    integer and only addresses."""
    program = plan.program
    nodes = set(plan.groups[gi].nodes)
    addresses: set[int] = set()
    stack = [program.nodes[n].inputs[1] for n in nodes if program.nodes[n].op in elementwise.INDEXING]
    while stack:
        j = stack.pop()
        if j in addresses:
            continue
        addresses.add(j)
        if j in nodes:
            if program.nodes[j].op not in elementwise.INDEX_MAPS:  # an index computed here: integer arithmetic
                return True
            stack.extend(program.nodes[j].inputs)
    values = nodes - addresses
    reads = {j for n in values for k, j in enumerate(program.nodes[n].inputs)
             if not (k == 1 and program.nodes[n].op in elementwise.INDEXING)}
    return any(program.nodes[n].dtype.kind == "int" for n in values | reads)


def lower_group(plan: FusionPlan, gi: int, tiling: Any, name: str, warp_size: int | None = None,
                isa: str | None = None) -> GroupKernel | blas.Call | sdpa.Call | str:
    """The group's Triton kernel, its library call (``isa="blas"``), or the reason it stays in torch."""
    kind = plan.groups[gi].kind
    if is_blas(isa):
        call = blas.core(plan, gi)
        return call if call is not None else "the library cannot run this group whole"
    if isa == SDPA:
        attn = sdpa.core(plan, gi)
        return attn if attn is not None else "not an attention torch's scaled_dot_product_attention computes"
    if isa == NHWC and kind == LIBRARY:
        conv = conv_nhwc.core(plan, gi)
        if conv is None:
            return "the library cannot run this conv on channels-last operands"
        return conv_nhwc.Call(conv, O.get(plan.program.nodes[conv].op).meta["spatial"], keep=False)
    if isa == NHWC and kind == ELEMENTWISE:  # the epilogue of a channels-last conv, transposing as it reads
        stored = _channels_last_read(plan, gi)
        if stored is None:
            return "no channels-last conv output read"
        try:
            return layout.lower_stored(plan, gi, tiling, name, warp_size, *stored)
        except NotLowerable as exc:
            return str(exc)
    if kind not in LOWERINGS:
        return f"no Triton lowering for {kind} groups"
    if _integers(plan, gi):
        return INTEGERS
    try:
        return LOWERINGS[kind].lower(plan, gi, tiling, name, warp_size, isa)
    except NotLowerable as exc:
        return str(exc)


def lowers(plan: FusionPlan, gi: int, tiling: Any, isa: str | None = None, warp_size: int | None = None) -> bool:
    """Whether ``lower_group`` returns a GroupKernel for group ``gi`` (rather than the reason it stays in
    torch), decided by the lowering's ``check`` without generating code where that decides it: element-wise,
    layout, attention and split-K GEMV groups always, scans read at the sweep's own index, matmuls with
    layout prologues and an element-wise epilogue (TMA's fit included), and every group rejected for
    float64, a tiling of another kind, tl.dot's minimum tile, the wrong number of matmuls, unsupported
    reductions or scans, or a row reduction's refusals (its dry walk). The rest (row reductions that
    lower, matmuls with row statistics or reductions, scans read through an index map) is decided by
    lowering the group and discarding the source."""
    kind = plan.groups[gi].kind
    if is_blas(isa):
        return blas.core(plan, gi) is not None
    if isa == SDPA:
        return sdpa.core(plan, gi) is not None
    if isa == NHWC and kind == ELEMENTWISE:  # as lower_group: the epilogue reads a channels-last conv output
        stored = _channels_last_read(plan, gi)
        if stored is None:
            return False
        try:
            layout.lower_stored(plan, gi, tiling, f"_probe{gi}", warp_size, *stored)
        except NotLowerable:
            return False
        return True
    if kind not in LOWERINGS or _integers(plan, gi):
        return False
    module = LOWERINGS[kind]
    try:
        if module.check(plan, gi, tiling, warp_size, isa):
            return True
        module.lower(plan, gi, tiling, f"_probe{gi}", warp_size, isa)  # only the lowering itself can tell
    except NotLowerable:
        return False
    return True


def runs_as_torch(plan: FusionPlan, gi: int, tiling: Any, isa: str | None = None, warp_size: int | None = None) -> bool:
    """True when group ``gi`` has no Triton lowering at this tiling and would run as torch code (the
    candidate enumerator charges such groups; library groups split into torch + a Triton epilogue)."""
    if plan.groups[gi].kind == LIBRARY:
        return False
    return not lowers(plan, gi, tiling, isa, warp_size)


def window_pool(plan: FusionPlan, gi: int) -> int | None:
    """The pooling node of library group ``gi`` when our element-wise kernel can compute the group whole,
    each output from its window (ISA choice ``window``): one library op, a max / avg pooling of at most
    ``elementwise.MAX_WINDOW`` positions, no float64; else None."""
    program = plan.program
    g = plan.groups[gi]
    libs = [n for n in g.nodes if node_kind(program.nodes[n].op) == LIBRARY]
    if g.kind != LIBRARY or len(libs) != 1 or program.nodes[libs[0]].op not in elementwise.POOLS:
        return None
    if any(program.nodes[n].dtype.name == "fp64" for n in g.nodes):
        return None
    if math.prod(attr(program, libs[0], "kernel_size")) > elementwise.MAX_WINDOW:
        return None
    return libs[0]


def _channels_last_read(plan: FusionPlan, gi: int) -> tuple[int, tuple[int, ...]] | None:
    """(conv node, its channels-last axis order) of the 2-d / 3-d conv whose output group ``gi`` reads."""
    program = plan.program
    for j in plan.inputs_of(gi):
        meta = O.get(program.nodes[j].op).meta
        if meta.get("shape_family") in CONV_FAMILIES and meta.get("spatial") in (2, 3):
            return j, conv_nhwc.permutation(meta["spatial"])
    return None


def _keep_channels_last(plan: FusionPlan, lib_gi: int, tail_gi: int) -> bool:
    """Whether library group ``lib_gi``'s channels-last conv output may stay so: the tail group alone reads
    it (no other group, not a program output) and reads it as a tiled transpose (``layout.stored_route``)."""
    program = plan.program
    conv = next(n for n in plan.groups[lib_gi].nodes if node_kind(program.nodes[n].op) == LIBRARY)
    users = program.users()[conv]
    if conv in program.outputs or not users or any(u not in plan.groups[tail_gi].nodes for u in users):
        return False
    stored = _channels_last_read(plan, tail_gi)
    return stored is not None and stored[0] == conv and layout.stored_route(plan, tail_gi, *stored) is not None


def _kernel_name(plan: FusionPlan, gi: int) -> str:
    """Group ``gi``'s jit function name: ``_g<gi>_`` and its ops' names (``_g1_mul_relu``), at most 40 characters."""
    ops = "_".join(dict.fromkeys(n.op for n in (plan.program.nodes[j] for j in plan.groups[gi].nodes) if node_kind(n.op)))
    return f"_g{gi}_{ops[:40]}"


def _chain_channels_last(plan: FusionPlan, lowered: list[Any], tilings: list[Any], warp_size: int,
                         finish: Callable[[int, Any], Any]) -> None:
    """Channels-last from one conv to the next (in place on ``lowered``): the element-wise epilogue of a conv
    run channels-last (it reads the conv's output so), whose outputs are read only by channels-last convs, each
    as its input, and by other such epilogues, stores them channels-last too (``layout.lower_physical``); those
    convs take them as they are (``conv_nhwc.Call.chained``) and those epilogues read them in that order
    (``also``): a conv -> batch norm -> ReLU -> conv chain, a ResNet block's residual too, pays no transpose
    between convs. An epilogue that cannot be lowered so leaves the chains through it out. ``finish`` gives a
    lowered kernel the target's knobs (as every group's)."""
    program = plan.program
    users = program.users()
    owner = plan.group_of()
    conv_group = {k.conv: gj for gj, k in enumerate(lowered) if isinstance(k, conv_nhwc.Call)}

    def after_conv(gk: int) -> conv_nhwc.Call | None:
        """The channels-last conv whose output epilogue ``gk`` reads so (None: not such an epilogue)."""
        prev = lowered[gk - 1] if gk else None
        ok = isinstance(lowered[gk], GroupKernel) and isinstance(prev, conv_nhwc.Call) and prev.keep
        return prev if ok else None

    chains: dict[int, list[tuple[int, int]]] = {}  # epilogue -> its (output, reader) pairs
    for gi in range(len(lowered)):
        prev = after_conv(gi)
        if prev is None:
            continue
        outs = plan.outputs_of(gi)
        readers = [(o, u) for o in outs for u in users[o]]

        def fits(o: int, u: int, rank: int = prev.rank) -> bool:
            if u in conv_group:
                return program.nodes[u].inputs[0] == o and o not in program.nodes[u].inputs[1:] \
                    and lowered[conv_group[u]].rank == rank
            reader = owner.get(u)
            return reader is not None and reader > gi and (c := after_conv(reader)) is not None and c.rank == rank

        if readers and not any(o in program.outputs for o in outs) and all(fits(o, u) for o, u in readers):
            chains[gi] = readers
    originals = list(lowered)
    while chains:
        also: dict[int, dict[int, tuple[int, ...]]] = {}
        for gi, readers in chains.items():
            for o, u in readers:
                if u not in conv_group:
                    also.setdefault(owner[u], {})[o] = conv_nhwc.permutation(lowered[gi - 1].rank)
        failed = None
        for gk in sorted(set(chains) | set(also)):
            prev = originals[gk - 1]
            lower = layout.lower_physical if gk in chains else layout.lower_stored
            try:
                lowered[gk] = finish(gk, lower(plan, gk, tilings[gk], _kernel_name(plan, gk), warp_size, prev.conv,
                                               conv_nhwc.permutation(prev.rank), also.get(gk)))
            except NotLowerable:
                failed = gk
                break
        if failed is None:
            break
        # the chains that needed it lowered so are out; try the rest again from the groups as they were
        lowered[:] = originals
        chains = {gi: r for gi, r in chains.items() if gi != failed and all(owner.get(u) != failed for _, u in r)}
    for readers in chains.values():
        for _, u in readers:
            if u in conv_group:
                lowered[conv_group[u]] = replace(lowered[conv_group[u]], chained=True)


def _split_library(candidate: Candidate) -> tuple[FusionPlan, list[Any], dict[int, str]]:
    """A library group (conv / pool + epilogue) becomes the library op (torch, with the views feeding
    it) followed by its element-wise epilogue as a group of its own, which the Triton element-wise
    lowering fuses into one kernel; a pooling group whose ISA choice is ``window`` becomes one element-wise
    group whole (the emitter computes each output's window). Returns the plan, a tiling per group and the ISA choice per group."""
    plan = candidate.plan
    program = plan.program
    groups: list[Group] = []
    tilings: list[Any] = []
    isa: dict[int, str] = {}
    chosen = dict(candidate.isa)
    for gi, g in enumerate(plan.groups):
        t = candidate.tilings[gi] if gi < len(candidate.tilings) else None
        if g.kind == LIBRARY and chosen.get(gi) == WINDOW and window_pool(plan, gi) is not None:
            if isa.get(len(groups) - 1) == NHWC and window_reader(plan, gi - 1) == gi:
                isa[len(groups)] = NHWC  # the conv's channels-last output, read window by window
            groups.append(Group(ELEMENTWISE, g.nodes))  # the pooling's windows in our kernel, fused whole
            tilings.append(t)
            continue
        if g.kind == LIBRARY:
            libs = [n for n in g.nodes if node_kind(program.nodes[n].op) == LIBRARY]
            head = set(libs).union(*(plan.feeding(gi, n) for n in libs))  # the library ops and their prologue
            tail = tuple(n for n in g.nodes if n not in head)
            if tail and len(libs) == 1:
                if chosen.get(gi) == NHWC:  # the conv on channels-last operands; its epilogue transposes back
                    isa[len(groups)] = isa[len(groups) + 1] = NHWC
                groups += [Group(LIBRARY, tuple(sorted(head))), Group(ELEMENTWISE, tail)]
                epilogue = t if isinstance(TEMPLATES.tile_of(plan, gi, t), ElementwiseTile) else None  # its BLOCK, num_warps
                tilings += [None, epilogue]
                continue
        if gi in chosen:
            isa[len(groups)] = chosen[gi]
        groups.append(g)
        tilings.append(t)
    split = FusionPlan(program, tuple(groups))
    for gi in [g for g, choice in isa.items() if choice == NHWC and groups[g].kind == ELEMENTWISE]:
        if not _keep_channels_last(split, gi - 1, gi):  # the library transposes back; a plain epilogue
            del isa[gi]
    return split, tilings, isa


@dataclass
class _Generic:
    """A shape-generic emission: the run-time dims' traced values, their ranges, the guards recorded."""

    values: dict[str, int]
    ranges: dict[str, tuple[int, int]]
    recorder: traced.Recorder
    static: FusionPlan | None = None  # the plan at the concrete binding (groups lowered specialized)


def emit(candidate: Candidate, hw: HardwareSpec, name: str, *, autotune: bool = False,
         ranges: Mapping[str, tuple[int, int]] | None = None) -> Kernel:
    """One kernel file for ``candidate``. ``autotune`` wraps each element-wise and row-reduction kernel in
    ``@triton.autotune`` over the best feasible tilings of its group on ``hw`` instead of fixing the
    candidate's tiling (the empirical selection already measures tilings as separate candidates).

    ``ranges`` (dim name -> inclusive (low, high)) makes the kernel shape-generic: those dims are run-time
    arguments (read from the arguments' shapes, passed to each jit function that uses them, in the grids
    and the intermediates' shapes), the lowerings' decisions on them are the guards the file checks at each
    call (``ir.traced``), and ``meta["generic"]`` says whether the guards hold at every size of the ranges
    (else ``meta["generic_why"]`` names the first that fails where; ``backends.kernel.shape_generic``). A
    group whose source names a dim where no parameter can carry it (``_with_dims``) is lowered at the
    candidate's sizes, guarded by ``dim == size``. Without ``ranges`` the file is the static kernel, as
    before."""
    def build(values: dict[str, int] | None, recorder: traced.Recorder | None) -> Kernel:
        generic = None if values is None else _Generic(values, {d: tuple(r) for d, r in ranges.items()}, recorder)
        return _emit(candidate, hw, name, autotune, generic)

    if not ranges:
        return build(None, None)
    return shape_generic(build, candidate.plan.program, ranges, _code, NotLowerable)


def _emit(candidate: Candidate, hw: HardwareSpec, name: str, autotune: bool, generic: _Generic | None) -> Kernel:
    plan, tilings, isa = _split_library(candidate)
    if generic is not None:
        generic.static = plan
        plan = FusionPlan(traced.program_over(plan.program, generic.values), plan.groups)
    program = plan.program
    warp_size = knobs(hw).warp_size
    lowered: list[GroupKernel | str] = []

    def finish(gi: int, k: Any) -> Any:
        """A group's kernel as the target runs it: the vendor's knobs, a persistent grid capped, autotuned."""
        if not isinstance(k, GroupKernel):
            return k
        k = _vendor_knobs(k, TEMPLATES.tile_of(plan, gi, tilings[gi], hw), hw, warp_size)
        if k.persistent:  # one program per slot the GPU keeps resident, each looping over tiles
            tile = TEMPLATES.tile_of(plan, gi, tilings[gi], hw)
            cap = int(hw.value("compute.units")) * tile.blocks_per_sm(hw)
            k = replace(k, grid=f"min({k.grid}, {cap})" if isinstance(k.grid, traced.Traced) else min(k.grid, cap))
        if autotune and k.grid_meta is not None:
            k = _autotuned(k, plan, gi, hw)
        return k

    for gi in range(len(plan.groups)):
        k = lower_group(plan, gi, tilings[gi], _kernel_name(plan, gi), warp_size, isa.get(gi))
        if generic is not None and isinstance(k, GroupKernel):
            k = _with_dims(k, gi, tilings[gi], warp_size, isa.get(gi), generic)
        lowered.append(finish(gi, k))
    for gi, k in enumerate(lowered):  # a channels-last conv stays so where its epilogue lowered transposing
        if isinstance(k, conv_nhwc.Call) and isa.get(gi + 1) == NHWC:
            if isinstance(lowered[gi + 1], GroupKernel):
                lowered[gi] = replace(k, keep=True)
            else:
                del isa[gi + 1]
                lowered[gi + 1] = lower_group(plan, gi + 1, tilings[gi + 1], _kernel_name(plan, gi + 1), warp_size)
                if generic is None:
                    lowered[gi + 1] = finish(gi + 1, lowered[gi + 1])
    if generic is None:
        _chain_channels_last(plan, lowered, tilings, warp_size, finish)
    returns = _returns(program, lowered)
    source = _file(candidate, plan, hw, name, lowered, isa, returns, generic)
    triton_groups = [k for k in lowered if isinstance(k, GroupKernel)]
    gemms, attentions = (sum(isinstance(k, t) for k in lowered) for t in (blas.Call, sdpa.Call))
    worst = max((k.resources for k in triton_groups), key=lambda r: r.get("block_elems", 0), default={})
    res = {key: max(k.resources[key] for k in triton_groups)
           for key in ("block_elems", "threads", "grid", "smem_bytes", "regs_per_thread")} if triton_groups else {}
    if res:
        res["launch"] = worst.get("launch")
    meta = {"lowering": " ".join(f"{k}:{n}" for k, n in
                                 (("triton", len(triton_groups)), ("blas", gemms), ("sdpa", attentions),
                                  ("torch", len(lowered) - len(triton_groups) - gemms - attentions)) if n),
            "plan": plan.name, "groups": len(plan.groups), "rules": list(candidate.variant.rules),
            "predicted_us": candidate.predicted_seconds * 1e6}
    return Kernel(name, source, "kernel", "return" if returns else "dps", "candidate", res, meta)


def _returns(program: Any, lowered: list[Any]) -> bool:
    """Whether the kernel returns its outputs rather than writing them into arguments: where the library's
    attention computes a program output, which then is torch's own result tensor (writing it into an
    argument would copy it once more)."""
    return any(isinstance(k, sdpa.Call) and k.out in program.outputs for k in lowered)


def _vendor_knobs(k: GroupKernel, tile: Any, hw: HardwareSpec, warp_size: int) -> GroupKernel:
    """Intel XPU launches take the register-file mode and the sub-group size (``data/hw_costs`` knobs)."""
    if hw.get("knobs.grf_mode") is None:
        return k
    grf = (tile.grf_mode if isinstance(tile, GpuTile) else None) or hw.value("knobs.grf_mode")[0]
    extra = tuple(kv for kv in (("grf_mode", str(grf)), ("warp_size", warp_size)) if kv[0] not in dict(k.launch))
    return replace(k, launch=k.launch + extra)


AUTOTUNE_CONFIGS = 8


def _autotuned(k: GroupKernel, plan: FusionPlan, gi: int, hw: HardwareSpec) -> GroupKernel:
    """``@triton.autotune`` over the group's best feasible tilings (by the cost model, then the
    candidate ranking's tie-break), the chosen one first; the grid becomes a function of META."""
    configs: list[str] = []
    chosen = "{" + ", ".join(f"{c!r}: {v}" for c, v in k.constexprs) + "}"
    for t in [None, *rank_tilings(plan, gi, hw, TEMPLATES, group_seconds, bucketed=False)]:
        if t is None:
            meta, warps = chosen, k.num_warps
        else:
            tile = t.typed
            sizes = [getattr(tile, key, None) for _, key in k.tiling_keys]
            if not isinstance(tile, GpuTile) or None in sizes:
                continue
            meta = "{" + ", ".join(f"{c!r}: {int(v)}" for (c, _), v in zip(k.tiling_keys, sizes)) + "}"
            warps = tile.num_warps
        cfg = f"triton.Config({meta}, num_warps={warps})"
        if cfg not in configs:
            configs.append(cfg)
        if len(configs) == AUTOTUNE_CONFIGS:
            break
    head = "@triton.autotune(configs=[\n    " + ",\n    ".join(configs) + ",\n], key=[])\n"
    return replace(k, source=head + k.source, constexprs=(), grid=-1,
                   note=k.note + f"; autotuned over {len(configs)} configs")


def _file(candidate: Candidate, plan: FusionPlan, hw: HardwareSpec, name: str, lowered: list[Any],
          isa: dict[int, str], returns: bool = False, generic: _Generic | None = None) -> str:
    program = plan.program
    head = [f"# axon_eg kernel {name}: {program.name} on {hw.name} (Triton)",
            f"# variant {candidate.variant.rank} (program {program.hash[:12]}, "
            f"{'not extracted' if candidate.variant.cost is None else f'tree cost {candidate.variant.cost}'}); "
            f"predicted {candidate.predicted_seconds * 1e6:.2f} us",
            f"# rules with e-nodes in this variant: {', '.join(candidate.variant.rules) or 'none (the program as written)'}",
            f"# fusion plan {plan.name}:"]
    for gi, (g, k) in enumerate(zip(plan.groups, lowered)):
        what = k.note if isinstance(k, GroupKernel) else blas.describe(program, k, isa.get(gi), hw.vendor, _align(hw)) \
            if isinstance(k, blas.Call) else sdpa.describe(k) if isinstance(k, sdpa.Call) \
            else conv_nhwc.describe(k) if isinstance(k, conv_nhwc.Call) else f"torch ({k})"
        if generic is None and gi in plan.static_groups():
            what += "; of the frozen parameters alone: computed once per version of them, not per call"
        head.append(f"#   g{gi} {g.kind} nodes {list(g.nodes)}: {what}")
    if _fp32_matmuls(program):
        head.append(f"# fp32 matmul precision: {candidate.precision} ("
                    + {"tf32": "TF32 tensor cores allowed",
                       "strict": "fp32 FMAs and the library's fp32 GEMM only"}.get(
                        candidate.precision, "fp32 accuracy (fp32 FMAs, the library's fp32 GEMM or the 3xTF32 split), "
                                             "as torch.backends.cuda.matmul.allow_tf32 off") + ")")
    head += ["", "import math  # noqa: F401", "", "import torch", "import torch.nn.functional as F  # noqa: F401",
             "import triton", "import triton.language as tl", "", "",
             guard_source(call_signature(program, _params(program), outputs=not returns),
                          ranges=generic.ranges if generic else None),
             "", ""]
    jits = [k.source for k in lowered if isinstance(k, GroupKernel)]
    if any("tl.make_tensor_descriptor" in j for j in jits):
        jits.insert(0, tma.ALLOCATOR)
    if any(isinstance(k, blas.Call) and program.nodes[k.mm].dtype.name == "fp32" for k in lowered):
        jits.insert(0, blas.FP32_MATMUL)
    if any(isinstance(k, conv_nhwc.Call) for k in lowered):
        jits.insert(0, conv_nhwc.TRANSPOSE)
        jits.insert(0, conv_nhwc.WEIGHT_CACHE)
    launcher = _launcher(plan, lowered, isa, _align(hw), returns, generic)
    if generic is not None:  # the guards are complete once every line of the file is written
        launcher = launcher.replace(_GUARDS_HERE, _guard_lines(generic))
    return "\n".join(head) + "\n\n".join(jits) + ("\n\n" if jits else "") + launcher


def _align(hw: HardwareSpec) -> int:
    """The library's row alignment in bytes (``memory.library_row_alignment``; 16 where not given)."""
    return int(hw.get("memory.library_row_alignment") or 16)


def _fp32_matmuls(program: Any) -> bool:
    return any(n.kind is O.OpKind.CONTRACTION and program.nodes[n.inputs[0]].dtype.name == "fp32" for n in program.nodes)


def _params(program: Any) -> list[str]:
    """The launcher's parameter names of the program's inputs (then come ``out0, out1, ...``)."""
    taken: set[str] = set()
    return [identifier(spec.name, taken) for spec in program.inputs]


def _tuple(names: list[str]) -> str:
    return f"({names[0]},)" if len(names) == 1 else f"({', '.join(names)})"


def _launcher(plan: FusionPlan, lowered: list[Any], isa: dict[int, str], align: int = 16,
              returns: bool = False, generic: _Generic | None = None) -> str:
    """The launcher ``kernel``: destination passing (``kernel(*inputs, *outputs)``), or with ``returns``
    ``kernel(*inputs)`` returning the outputs (one tensor, or a tuple). A shape-generic one (``generic``)
    reads its run-time dims from the arguments and checks its guards first."""
    program = plan.program
    params = _params(program)
    buf: dict[int, str] = dict(zip(program.input_ids, params))
    outs = [] if returns else [f"out{k}" for k in range(len(program.outputs))]
    target: dict[int, str] = {}
    for k, o in enumerate(outs and program.outputs):
        target.setdefault(o, outs[k])
    viewed: dict[int, int] = {}  # output -> the computed value it views, written straight into the output
    frozen = plan.static_groups() if generic is None else frozenset()  # their buffers are cached: not aliased
    for k, o in enumerate(program.outputs):
        v = viewed_output_source(program, o)
        if v is not None and v not in target and not any(v in plan.groups[gi].nodes for gi in frozen):
            viewed[o] = v
            if outs:
                target[v] = f"{outs[k]}.view({tuple(program.concrete_shape(v))})"
    first_in = buf[program.input_ids[0]] if program.input_ids else "torch.empty(0)"
    lines = [f"def kernel({''.join(f'{p}=None, ' for p in params + outs)}*extra):"]
    if generic is None:
        lines += ["    # the arguments must be what the kernel was built for (SIGNATURE): sizes, dtypes and layout are baked in",
                  f"    check_call({_tuple(params + outs)}, extra, SIGNATURE, 'kernel', KernelCallError, torch.Tensor)"]
    else:
        signature = call_signature(program, params, outputs=not returns)
        named = {d for _, shape, _ in signature for d in shape if isinstance(d, str) and d.isidentifier()}
        missing = sorted(set(generic.ranges) - named)
        if missing:
            raise NotLowerable(f"dim {missing[0]} is no argument's axis: a shape-generic kernel reads its sizes from "
                               "its arguments")
        lines += ["    # the arguments must be what the kernel was built for (SIGNATURE; SIZES bounds the run-time dims)",
                  f"    sizes = check_call({_tuple(params + outs)}, extra, SIGNATURE, 'kernel', KernelCallError, "
                  "torch.Tensor, ranges=SIZES)",
                  *(f"    {traced.param(d)} = sizes[{d!r}]" for d in sorted(generic.ranges)),
                  _GUARDS_HERE]
    lines.append(f"    dev = {first_in}.device")

    made: set[int] = set()  # nodes a group wrote into a buffer of their own
    users = program.users()
    owner = {n: gi for gi, g in enumerate(plan.groups) for n in g.nodes}

    def ensure(j: int) -> str:
        """A contiguous tensor holding node j (views and constants are built with torch)."""
        if j in buf:
            return buf[j]
        node = program.nodes[j]
        if node_kind(node.op) is not None:
            raise AssertionError(f"node {j} ({node.op}) is read before its group ran")
        args = [ensure(i) for i in node.inputs]
        if node.is_constant:
            return torch_expr(program, j, args)
        lines.append(f"    t{j} = ({torch_expr(program, j, args)}).contiguous()")
        buf[j] = f"t{j}"
        return buf[j]

    def written(o: int) -> str:
        """The buffer a group writes node ``o`` to: the output argument, else a fresh tensor."""
        if o not in target:
            dt = program.nodes[o].dtype.torch_name
            lines.append(f"    t{o} = torch.empty({tuple(program.concrete_shape(o))}, dtype=torch.{dt}, device=dev)")
        buf[o] = target.get(o, f"t{o}")
        made.add(o)
        return buf[o]

    def group(gi: int, g: Group, k: Any) -> None:
        lines.append(f"    # g{gi}: {g.kind}")
        if isinstance(k, blas.Call):  # the library writes the group's output buffer
            inside = set(g.nodes)
            reads = {j: ensure(j) for j in plan.inputs_of(gi) if j not in inside}
            lines.extend(blas.source(program, k, reads, written(k.out), isa.get(gi), align))
            return
        if isinstance(k, conv_nhwc.Call):  # the library conv on channels-last copies (conv_nhwc)
            args = [ensure(j) for j in program.nodes[k.conv].inputs]
            conv_lines, name = conv_nhwc.source(program, k, args, lambda a, j=k.conv: torch_expr(program, j, a),
                                                None if k.keep else target.get(k.conv))
            lines.extend(conv_lines)
            buf[k.conv] = name
            made.add(k.conv)
            return
        if isinstance(k, sdpa.Call):  # the library's attention, copied into the group's output buffer
            bufs = {j: ensure(j) for j in plan.inputs_of(gi)}
            # read only by library GEMMs (through torch views): torch's own result as it is (the flash kernels
            # write [batch, rows, heads, dim], so the usual transpose back before the output projection is free)
            direct = k.out not in program.outputs and bool(users[k.out]) and all(
                u in owner and isinstance(lowered[owner[u]], blas.Call) for u in users[k.out])
            if (returns and k.out in program.outputs) or direct:  # returned as torch made it
                buf[k.out] = f"t{k.out}"
                made.add(k.out)
                lines.extend(sdpa.bound(k, bufs, buf[k.out], tuple(program.concrete_shape(k.out)),
                                        contiguous=bool(users[k.out]) and not direct))
            else:
                lines.extend(sdpa.source(k, bufs, written(k.out)))
            return
        if isinstance(k, GroupKernel):
            args = [ensure(j) for j in k.reads] + [written(o) for o in k.writes]
            if k.host:  # the group's own host function allocates scratch and launches its kernels
                kw = [f"{c}={v!r}" for c, v in k.launch if c != "num_stages"] + [f"{d}={d}" for d in k.dims]
                lines.append(f"    {k.name}({', '.join(args + kw)})")
                return
            dims = [f"{d}={d}" for d in k.dims]
            if isinstance(k.grid, int) and k.grid < 0:  # autotuned: the tiling and the grid come from the chosen config
                kw = ", ".join([f"{c}={v!r}" for c, v in k.launch] + dims)
                lines.append(f"    {k.name}[lambda META: ({k.grid_meta},)]({', '.join(args)}{', ' + kw if kw else ''})")
                return
            kw = ", ".join([f"{c}={v}" for c, v in k.constexprs] + dims + [f"num_warps={k.num_warps}"]
                           + [f"{c}={v!r}" for c, v in k.launch])
            lines.append(f"    {k.name}[({k.grid},)]({', '.join(args)}, {kw})")
            return
        _torch_group(program, plan, gi, ensure, target, buf, lines)
        made.update(plan.outputs_of(gi))

    static = plan.static_groups() if generic is None else frozenset()
    if static:  # the parameters' values, computed once per version of the parameters they read
        _static_block(plan, sorted(static), lambda gi: group(gi, plan.groups[gi], lowered[gi]), buf, lines)
    for gi, (g, k) in enumerate(zip(plan.groups, lowered)):
        if gi not in static:
            group(gi, g, k)
    if returns:  # an input (or a view of one) returned as an output is a copy of its own
        results = [ensure(o) + ("" if o in made or viewed.get(o) in made else ".clone()") for o in program.outputs]
        lines.append(f"    return {results[0] if len(results) == 1 else _tuple(results)}")
        return "\n".join(lines) + "\n"
    for k, o in enumerate(program.outputs):  # outputs that are inputs, views, repeats
        if buf.get(o) != outs[k] and not (o in viewed and buf.get(viewed[o]) == target.get(viewed[o])):
            lines.append(f"    {outs[k]}.copy_({ensure(o)})")
    return "\n".join(lines) + "\n"



def _static_block(plan: FusionPlan, static: list[int], run: Any, buf: dict[int, str], lines: list[str]) -> None:
    """The launcher's lines for the groups of the frozen parameters alone (``FusionPlan.static_groups``), in a block
    that runs them on the first call and again only when a parameter they read is another tensor or was
    changed in place (its ``_version``); otherwise it restores every buffer they made from the module-level
    ``_STATIC``. The cache holds the parameter tensors themselves, so no other tensor can take their address.
    ``run(gi)`` appends group ``gi``'s lines (and its buffers to ``buf``)."""
    program = plan.program
    reads: set[int] = set()
    stack = [j for gi in static for n in plan.groups[gi].nodes for j in program.nodes[n].inputs]
    while stack:
        j = stack.pop()
        if j not in reads:
            reads.add(j)
            stack.extend(program.nodes[j].inputs)
    params = [buf[j] for j in program.input_ids if j in reads]
    groups = ", ".join(f"g{gi}" for gi in static)
    lines[0:0] = ["_STATIC: dict = {}  # the launcher's values of the frozen parameters alone, computed once per version",
                  "", ""]
    lines += [f"    # {groups}: of the frozen parameters alone, computed again only when one is another tensor or changed",
              f"    _src = {_tuple(params)}",
              '    _hit = _STATIC.get("v")',
              "    if _hit is None or any(a is not b or a._version != v for a, (b, v) in zip(_src, _hit[0])):"]
    before, start = set(buf), len(lines)
    for gi in static:
        run(gi)
    lines[start:] = ["\n".join("    " + row for row in text.split("\n")) for text in lines[start:]]
    names = list(dict.fromkeys(name for j, name in buf.items() if j not in before))
    lines += [f'        _STATIC["v"] = (tuple((a, a._version) for a in _src), {_tuple(names) if names else "()"})',
              "    else:",
              f"        {_tuple(names)} = _hit[1]" if names else "        pass"]



_GUARDS_HERE = "    # <guards>"


def _code(source: str) -> str:
    """A kernel file without its header comments (which state sizes and predictions)."""
    return source[source.index("\nimport math"):]


def _guard_lines(generic: _Generic) -> str:
    """The launcher's check of the guards the lowerings recorded (``ir.traced``), each raising the file's
    KernelCallError with the predicate and the sizes it was called with."""
    out = []
    for g in generic.recorder.guards:
        called = ", ".join(f"{d} = {{{traced.param(d)}}}" for d in sorted(g.dims))
        out += [f"    if not ({g.text()}):",
                f"        raise KernelCallError(f\"kernel: built for sizes where {g.readable()}; called with {called}\")"]
    return "\n".join(out) if out else "    # no size decision to guard: every size of SIZES runs this code"


_DIM_NAME = re.compile(rf"\b{traced.PREFIX}[A-Za-z_]\w*")


def _with_dims(k: GroupKernel, gi: int, tiling: Any, warp_size: int | None, isa: str | None,
               generic: _Generic) -> GroupKernel | str:
    """A group kernel lowered over traced dims: each function of its source that names a dim takes it as its
    last parameters, a host function takes every dim its source names and passes each jit function its own
    at the launch (before ``**launch``), and the launcher passes them by keyword (``GroupKernel.dims``). A
    source naming a dim in a function it cannot give one to (a helper without parameters) is lowered again at
    the concrete sizes, guarded by ``dim == size`` for each dim of the group."""
    k = replace(k, resources=traced.concrete(k.resources))
    used = sorted(set(_DIM_NAME.findall(k.source)))
    if not used:
        return k
    src = k.source
    funcs = [f for f in ast.parse(src).body if isinstance(f, ast.FunctionDef)]
    needs = {f.name: sorted(set(_DIM_NAME.findall(ast.get_source_segment(src, f) or ""))) for f in funcs}
    host = next((f for f in funcs if f.name == k.name), None) if k.host else None
    if host is not None:
        needs[host.name] = used
    covered = set().union(*needs.values())
    if set(used) - covered or any(needs[f.name] and not f.args.args for f in funcs) or (
            not k.host and not needs.get(k.name)):
        return _specialized(k, gi, tiling, warp_size, isa, generic)
    lines = src.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []  # (line, column, text), applied from the end
    for f in funcs:
        if needs[f.name]:
            last = f.args.args[-1]
            edits.append((last.end_lineno - 1, last.end_col_offset, "".join(f", {d}" for d in needs[f.name])))
    for f in funcs if host is not None else ():  # the host function's launches of the jit functions
        if f is host or not needs[f.name]:
            continue
        text = "".join(lines[host.lineno - 1:host.end_lineno])
        for m in re.finditer(rf"\b{re.escape(f.name)}\[", text):
            at = text.index("**launch)", m.end())
            row = host.lineno - 1 + text.count("\n", 0, at)
            col = at - (text.rfind("\n", 0, at) + 1)
            edits.append((row, col, "".join(f"{d}={d}, " for d in needs[f.name])))
    for row, col, text in sorted(edits, reverse=True):
        lines[row] = lines[row][:col] + text + lines[row][col:]
    return replace(k, source="".join(lines), dims=tuple(used))


def _specialized(k: GroupKernel, gi: int, tiling: Any, warp_size: int | None, isa: str | None,
                 generic: _Generic) -> GroupKernel | str:
    """Group ``gi`` lowered at the concrete sizes, guarded by ``dim == size`` for each dim it touches."""
    assert generic.static is not None
    program = generic.static.program
    names = set().union(*(D.names(d) for n in generic.static.groups[gi].nodes for d in program.nodes[n].shape),
                        *(D.names(d) for j in generic.static.inputs_of(gi) for d in program.nodes[j].shape))
    for d in sorted(names & set(generic.values)):
        generic.recorder.add(traced.Guard(D.sym(d), "==", int.__int__(generic.values[d])))
    again = lower_group(generic.static, gi, tiling, k.name, warp_size, isa)
    return replace(again, resources=traced.concrete(again.resources)) if isinstance(again, GroupKernel) else again


_NATIVE = ("matmul",)  # ops that run on their declared 16-bit dtype (tensor cores), accumulating in fp32


def _torch_group(program: Any, plan: FusionPlan, gi: int, ensure: Any, target: dict[int, str], buf: dict[int, str],
                 lines: list[str]) -> None:
    """A group without a Triton lowering, as torch code. Like a fused kernel it computes in fp32 and
    rounds once when it stores (16-bit programs); matmul and library ops take their operands in the
    declared dtype and return fp32. Float64 programs run natively."""
    g = plan.groups[gi]
    fp32 = all(program.nodes[n].dtype.name in ("bf16", "fp16", "fp32") for n in g.nodes)
    local: dict[int, str] = {}

    def computed_here(i: int) -> bool:
        """A view (no kernel of its own) of a value this group computes: built here, from the local value."""
        node = program.nodes[i]
        return (i not in buf and node_kind(node.op) is None and not O.is_source(node.op)
                and any(k in local or computed_here(k) for k in node.inputs))

    def arg(i: int) -> str:
        if i in local:
            return local[i]
        if computed_here(i):
            lines.append(f"    t{i} = {torch_expr(program, i, [arg(k) for k in program.nodes[i].inputs])}")
            local[i] = f"t{i}"
            return local[i]
        name = ensure(i)
        low = fp32 and program.nodes[i].dtype.name in ("bf16", "fp16") and not program.nodes[i].is_constant
        return f"{name}.float()" if low else name

    for n in sorted(g.nodes):  # node order is a topological order; a merged group's tuple need not be
        node = program.nodes[n]
        native = fp32 and (node.op in _NATIVE or node_kind(node.op) == LIBRARY)
        args = [arg(i) if not native or i in local else ensure(i) for i in node.inputs]
        if native:  # operands in their declared dtype; fp32 values computed in this group are cast back
            args = [f"{a}.to(torch.{program.nodes[i].dtype.torch_name})" if i in local else a
                    for a, i in zip(args, node.inputs)]
            lines.append(f"    t{n} = ({torch_expr(program, n, args)})" + (".float()" if fp32 else ""))
        else:
            lines.append(f"    t{n} = {torch_expr(program, n, args, compute_dtype='fp32' if fp32 else None)}")
        local[n] = f"t{n}"
    for o in plan.outputs_of(gi):
        if o in target:
            lines.append(f"    {target[o]}.copy_(t{o})")
            buf[o] = target[o]
        else:
            lines.append(f"    t{o} = t{o}.to(torch.{program.nodes[o].dtype.torch_name}).contiguous()")
            buf[o] = f"t{o}"
