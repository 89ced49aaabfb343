"""What every tile template shares: the space and tiling values the planner hands around (``Constraint``,
``TilingSpace``, ``Tiling``), the ``Tile`` base class a template derives from, the target's launch
``Knobs``, and the facts about a fusion group that the spaces read (its problem sizes, item size, live
tensors, whether it is a GEMV). ``DOT_MIN`` (tl.dot's smallest tile) is the one home of the GEMV
threshold: a matmul group with fewer than ``DOT_MIN`` output columns is a GEMV.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from functools import lru_cache
from typing import Any, ClassVar, Self

from axon_eg.hw import DEFAULT_HW, HardwareSpec, load
from axon_eg.ir import ops as O

from ..fusion import MATMUL, REDUCTION, FusionPlan

FP32 = 4
DOT_MIN = 16
"""tl.dot's smallest block edge (Triton refuses a dot with a dim below 16). A matmul whose N is below it is
a GEMV: its tilings skip tl.dot (``GemvTile``, ``SplitKTile``, ISA ``fma_reduce``)."""
LAUNCH_KNOBS = ("num_warps", "num_stages", "grf_mode")
"""Tiling parameters that change how a tile is launched, not its shape."""
SCHEME_KNOBS = {"SPLIT": 1, "SPLIT_K": 1, "LOOKBACK": 0}
"""Tiling parameters that choose an algorithm, not only a size, each with its value for the plain kernel: a
row or a scan split across programs, a split-K, a look-back scan. A group's kept tilings hold the best of each scheme, and
each scheme gets a measured slot (``extract.candidates``), so that a scheme the cost model ranks first but no
run has measured cannot crowd out the others."""
REGISTERS_PER_THREAD = 128
"""32-bit registers per thread when the hardware file does not say (``memory.registers.per_thread``):
a conservative cap."""

Values = Iterable[tuple[str, Any]] | Mapping[str, Any]


@dataclass(frozen=True)
class Constraint:
    name: str
    text: str
    holds: Callable[[dict[str, int | str]], bool]


@dataclass(frozen=True)
class Knobs:
    """The target's launch facts every GPU template needs: threads per warp (the largest the target
    offers, as the emitter launches) and the warp count of a launch that names none."""

    warp_size: int
    num_warps: int


def knobs(hw: HardwareSpec | None = None) -> Knobs:
    """Launch facts from ``hw`` (``hw.DEFAULT_HW``'s file when None). A NeuronCore has no warps: 1 and 1."""
    if hw is None:
        return _default_knobs()
    if hw.kind != "gpu":
        return Knobs(1, 1)
    return Knobs(int(max(hw.value("knobs.warp_size"))), int(hw.value("knobs.default_num_warps")))


@lru_cache(maxsize=1)
def _default_knobs() -> Knobs:
    return knobs(load(DEFAULT_HW))


@dataclass(frozen=True)
class TilingSpace:
    group: int
    kind: str  # the fusion group's kind
    dims: tuple[tuple[str, int], ...]  # the group's problem sizes: M, N, K, rows, cols, ...
    params: tuple[tuple[str, tuple], ...]
    constraints: tuple[Constraint, ...]
    template: type[Tile] | None = None  # the template whose space this is
    knobs: Knobs | None = field(default=None, compare=False)  # the target's launch defaults
    memo: tuple | None = field(default=None, compare=False, repr=False)  # what determines the space (``Tile.space``):
    # its feasible assignments are enumerated once per process for it (``_FEASIBLE``)

    def size(self) -> int:
        return math.prod(len(v) for _, v in self.params)

    def violated(self, assignment: Mapping[str, int | str]) -> list[str]:
        """Names of the constraints an assignment violates (empty: feasible)."""
        return [c.name for c in self.constraints if not c.holds(dict(assignment))]

    def tilings(self, limit: int | None = None) -> tuple[list[Tiling], dict[str, int]]:
        """Feasible, non-dominated assignments (deterministic order), each with its typed tile, and counts
        of what was pruned."""
        got = _FEASIBLE.get(self.memo) if self.memo is not None else None
        if got is None or got[0] is not self.memo[-1]:  # (the key's last item is the hardware spec's id)
            names = [n for n, _ in self.params]
            feasible, considered = [], 0
            for values in itertools.product(*(v for _, v in self.params)):
                considered += 1
                t = dict(zip(names, values))
                if not self.violated(t):
                    feasible.append(t)
            kept = _prune(feasible, self.template.monotone if self.template is not None else ())
            stats = {"considered": considered, "feasible": len(feasible), "kept": len(kept)}
            if self.memo is not None:
                _FEASIBLE[self.memo] = (self.memo[-1], kept, stats)
                while len(_FEASIBLE) > FEASIBLE_SIZE:
                    del _FEASIBLE[next(iter(_FEASIBLE))]
        else:
            _, kept, stats = got
        stats = dict(stats)
        if limit is not None:
            kept = kept[:limit]
        template = self.template
        return [Tiling(self.group, tuple(t.items()), template.of(t, self.knobs) if template is not None else None)
                for t in kept], stats


_FEASIBLE: dict[tuple, tuple[Any, list[dict], dict[str, int]]] = {}
FEASIBLE_SIZE = 4096
"""The feasible assignments of the spaces enumerated so far, by what determines a space (``Tile.space``: the
template, the group's facts, the hardware spec object): a model's regions repeat the same groups in every
variant, plan and layer. The oldest are dropped first."""


def _prune(candidates: list[dict], monotone: tuple[str, ...]) -> list[dict]:
    """Drop an assignment when another equal in every parameter but a reduction tile (the template's
    ``monotone`` parameters: BLOCK_K, TILE_K) has a larger value there: longer K tiles that still fit
    never lose on a roofline.
    ``num_stages`` is not monotone: on the H200 a 128x128x64 matmul tile ran at 0.91x of cuBLAS with
    3 stages and 0.86x with 5, and flash attention was fastest with 2 (the tie-breaks pick them)."""
    if not candidates or not monotone:
        return candidates
    best: dict[tuple, dict] = {}
    for t in candidates:
        key = tuple((k, v) for k, v in t.items() if k not in monotone)
        cur = best.get(key)
        if cur is None or tuple(t[k] for k in monotone) > tuple(cur[k] for k in monotone):
            best[key] = t
    return list(best.values())


@dataclass(frozen=True)
class Tiling:
    """One assignment of a space's parameters. ``values`` are what the candidate key, the tables and the
    kernel headers record; ``typed`` is the template's dataclass for them (``tiling.typed.BLOCK_M``), set
    for tilings the planner enumerates. A Tiling built by hand (``Tiling(0, (("BLOCK", 128),))``) has none:
    ``templates.tile_of(plan, gi, tiling)`` reads it with the template that applies to the group."""

    group: int
    values: tuple[tuple[str, int | str], ...]
    typed: Tile | None = field(default=None, compare=False, repr=False)

    def __getitem__(self, key: str) -> int | str:
        return dict(self.values)[key]

    def get(self, key: str, default: int | str | None = None) -> int | str | None:
        return dict(self.values).get(key, default)

    @property
    def template(self) -> type[Tile] | None:
        return type(self.typed) if self.typed is not None else None


@dataclass(frozen=True, kw_only=True)
class Tile:
    """A tile template: one frozen dataclass per kernel kind. Its fields are the tiling parameters the
    planner enumerates (the names the kernels' constexprs and the tables use) plus typed settings it
    does not enumerate; the class owns when it applies to a fusion group, its space, its defaults, its
    program count and its tie-break, and the hooks the cost model reads (re-read tile, loads in flight,
    blocks per SM, scratch traffic)."""

    kind: ClassVar[str] = ""
    launches: ClassVar[int] = 1  # kernel launches of one group
    monotone: ClassVar[tuple[str, ...]] = ()  # reduction tiles: of two fitting values the larger never loses
    cost_tolerance: ClassVar[float] = 1.03
    """Tilings predicted within this factor of the group's cheapest rank as equal, ordered by the
    tie-break (how far the cost model can be trusted to tell this kind's tilings apart)."""

    @classmethod
    def applies(cls, plan: FusionPlan, gi: int, hw: HardwareSpec | None) -> bool:
        """Whether this template tiles group ``gi`` on ``hw`` (None: a GPU)."""
        raise NotImplementedError

    @classmethod
    def params(cls, facts: GroupFacts, hw: HardwareSpec) -> tuple[list[tuple[str, tuple]], list[Constraint]]:
        """The space's parameters (name, candidate values) and constraints."""
        raise NotImplementedError

    @classmethod
    def space(cls, plan: FusionPlan, gi: int, hw: HardwareSpec) -> TilingSpace:
        facts = group_facts(plan, gi)
        params, constraints = cls.params(facts, hw)
        memo = (cls, facts.kind, tuple(sorted(facts.dims.items())), facts.item, facts.live, facts.reduces, hw.name,
                id(hw), hw)  # ``params`` reads the facts and the hardware spec alone
        return TilingSpace(gi, plan.groups[gi].kind, tuple(sorted(facts.dims.items())), tuple(params),
                           tuple(constraints), cls, knobs(hw), memo)

    @classmethod
    def of(cls, values: Values = (), launch: Knobs | None = None) -> Self:
        """The typed tile of ``values`` (unknown keys ignored); a field they lack takes its default, a warp
        count without one the target's (``launch``, else ``hw.DEFAULT_HW``'s)."""
        given = dict(values)
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in given:
                v = given[f.name]
                kwargs[f.name] = v if isinstance(v, str) or v is None else int(v)
            elif f.default is MISSING and f.name in ("num_warps", "finish_warps"):
                kwargs[f.name] = (launch or knobs()).num_warps
        return cls(**kwargs)

    @classmethod
    def read(cls, tiling: Tiling | Tile | None, launch: Knobs | None = None) -> Self:
        """``tiling`` as this template: its typed tile when it is one, else its values with the defaults."""
        if isinstance(tiling, cls):
            return tiling
        if isinstance(tiling, Tiling) and isinstance(tiling.typed, cls):
            return tiling.typed
        return cls.of(tiling.values if isinstance(tiling, Tiling) else (), launch)

    # -- what the cost model and the ranking read --------------------------------------------------
    def programs(self, plan: FusionPlan, gi: int) -> int:
        """Programs (thread blocks) of the group's launch."""
        return 1

    def tie_break(self, warp_size: int) -> tuple[float, ...]:
        """Order among tilings whose predicted costs are equal (smaller first); ``warp_size`` is the
        target's. The candidate ranking compares these tuples group by group across plans, so their
        values (not only their order within one template) are part of the ranking."""
        raise NotImplementedError

    def traffic_tile(self) -> tuple[int, int, int] | None:
        """(rows, columns, tile rows per swizzle group) of the output tile a matmul's operand re-read model
        assumes; None: no re-reads charged."""
        return None

    def in_flight(self, plan: FusionPlan, gi: int) -> tuple[int, int, int] | None:
        """(elements one program streams per iteration, full-width tensors streamed, their item size) for
        the cost model's Little's-law bound; None: the group is not modelled as latency-bound."""
        return None

    def blocks_per_sm(self, hw: HardwareSpec) -> int:
        """Programs one SM holds at once, for the wave-quantization model."""
        return 4

    def scratch_bytes(self, plan: FusionPlan, gi: int) -> int:
        """HBM bytes the group's kernels write and read back between launches."""
        return 0


@dataclass(frozen=True, kw_only=True)
class GpuTile(Tile):
    """A Triton launch: ``num_warps`` (the target's default when not given) and the Intel XPU register-file
    mode (``knobs.grf_mode``; None elsewhere)."""

    num_warps: int
    grf_mode: str | None = None


@dataclass(frozen=True)
class GpuFacts:
    """The hardware figures the GPU spaces share."""

    warps: tuple[int, ...]
    warp_size: int
    smem: int
    regs: int
    per_thread: int
    stages: tuple[int, ...]
    extra: tuple[tuple[str, tuple], ...]  # vendor knobs enumerated with every tile (Intel: grf_mode)


def gpu_facts(hw: HardwareSpec) -> GpuFacts:
    extra = (("grf_mode", tuple(hw.value("knobs.grf_mode"))),) if hw.get("knobs.grf_mode") is not None else ()
    return GpuFacts(tuple(hw.value("knobs.num_warps")), max(hw.value("knobs.warp_size")),
                    hw.value("memory.shared.per_block"), hw.value("memory.registers.per_sm"),
                    int(hw.get("memory.registers.per_thread") or REGISTERS_PER_THREAD),
                    tuple(range(int(hw.value("knobs.num_stages.min")), int(hw.value("knobs.num_stages.max")) + 1)),
                    extra)


def tile_range(hw: HardwareSpec, key: str, cap: int | None = None) -> tuple[int, ...]:
    """The powers of two of the hardware file's range ``tiles.<key>``; ``cap`` (the problem size rounded
    up) lowers its top, never below its bottom."""
    lo, hi = hw.value(f"tiles.{key}")
    return pow2(lo, hi if cap is None else max(lo, min(hi, cap)))


def pow2(lo: int, hi: int) -> tuple[int, ...]:
    out, v = [], 1
    while v <= hi:
        if v >= lo:
            out.append(v)
        v *= 2
    return tuple(out)


def next_pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


# ------------------------------------------------------------------------------------- group facts
@dataclass(frozen=True)
class GroupFacts:
    kind: str  # the fusion group's kind
    dims: dict[str, int]  # M, N, K, BATCH of a matmul group; ROWS, COLS otherwise
    item: int  # the largest item size of the group's values
    live: int  # tiles held on chip at once: the tensors it reads and writes (at least 2)
    reduces: bool = False  # the group holds a reduction (a matmul's row statistics or N reduction)


def group_facts(plan: FusionPlan, gi: int) -> GroupFacts:
    program = plan.program
    # a scalar constant takes no tile
    tensors = [j for j in plan.inputs_of(gi) + plan.outputs_of(gi) if math.prod(program.concrete_shape(j)) > 1]
    item = max(program.nodes[n].dtype.itemsize for n in plan.groups[gi].nodes)
    reduces = any(O.get(program.nodes[n].op).kind is O.OpKind.REDUCE for n in plan.groups[gi].nodes)
    return GroupFacts(plan.groups[gi].kind, group_dims(plan, gi), item, max(2, len(tensors)), reduces)


def group_dims(plan: FusionPlan, gi: int) -> dict[str, int]:
    """Problem sizes of a group from its anchor node's concrete shapes."""
    program = plan.program
    group = plan.groups[gi]
    anchor = group.anchor(program)
    node = program.nodes[anchor]
    if node.kind is O.OpKind.CONTRACTION:
        a, b = (program.concrete_shape(j) for j in node.inputs)
        out = program.concrete_shape(anchor)
        return {"M": a[-2], "N": b[-1], "K": a[-1], "BATCH": math.prod(out[:-2])}
    shape = program.concrete_shape(node.inputs[0] if node.inputs and group.kind == REDUCTION else anchor)
    cols = shape[-1] if shape else 1
    if node.kind is O.OpKind.SCAN and shape:  # the scanned lines: how many, how long, the inner stride
        axis = int(node.attrs["axis"]) % len(shape)
        return {"ROWS": max(1, math.prod(shape[:-1])), "COLS": cols, "SCAN_LINES": math.prod(shape[:axis]),
                "SCAN_LENGTH": shape[axis], "SCAN_INNER": math.prod(shape[axis + 1:])}
    axes = node.attrs.get("axes") if group.kind == REDUCTION and shape else None
    if axes is not None and all(isinstance(a, int) for a in axes) and axes:
        red = sorted({a % len(shape) for a in axes})
        # rows are the kept axes (INNER of them after the last reduced one: contiguous rows), columns the reduced
        inner = max(1, math.prod(shape[red[-1] + 1:]))
        kept = math.prod(d for a, d in enumerate(shape) if a not in red)
        return {"ROWS": max(1, kept), "COLS": max(1, math.prod(shape[a] for a in red)), "INNER": inner}
    return {"ROWS": max(1, math.prod(shape[:-1])) if shape else 1, "COLS": cols}


def is_gemv(plan: FusionPlan, gi: int) -> bool:
    """A matmul group with fewer than ``DOT_MIN`` output columns (the νGraph moved a reduction into the
    operand): too thin for tl.dot. The GEMV and split-K templates and the ISA choices ask this."""
    program = plan.program
    group = plan.groups[gi]
    if group.kind != MATMUL:
        return False
    node = program.nodes[group.anchor(program)]
    return node.kind is O.OpKind.CONTRACTION and program.concrete_shape(node.inputs[1])[-1] < DOT_MIN


def reduced_operand(plan: FusionPlan, gi: int) -> bool:
    """A GEMV whose vector is a reduction inside the same group (``x @ sum(W, -1)`` after the νGraph moved
    the reduction into B): the backend splits it over K (program p reduces its rows of W, then streams the
    same columns of x), so its tiling is a K slice per program and a streamed tile width."""
    program = plan.program
    group = set(plan.groups[gi].nodes)
    for n in group:
        node = program.nodes[n]
        if node.kind is O.OpKind.CONTRACTION:
            b = node.inputs[1]
            return b in group and O.get(program.nodes[b].op).kind is O.OpKind.REDUCE
    return False


def streams(plan: FusionPlan, gi: int) -> tuple[int, int]:
    """(full-width tensors a memory-bound group reads per element, their item size)."""
    program = plan.program
    anchor = plan.groups[gi].anchor(program)
    node = program.nodes[anchor]
    full = math.prod(program.concrete_shape(node.inputs[0] if plan.groups[gi].kind == REDUCTION and node.inputs
                                            else anchor))
    ins = [j for j in plan.inputs_of(gi) if math.prod(program.concrete_shape(j)) == full]
    item = max((program.nodes[j].dtype.itemsize for j in ins), default=4)
    return max(1, len(ins)), item


@dataclass(frozen=True)
class Templates:
    """One target's tile templates (``Backend.templates``): ``kinds`` in the order ``template_for`` asks them
    (their ``applies`` conditions exclude each other), and ``decode``, which reads a stored tiling's values
    back as one of them (``recover``). A target owns its templates (``backends/<target>/templates``); what
    they share, and this set, are target-neutral."""

    kinds: tuple[type[Tile], ...]
    decode: Callable[[str | None, Values, Knobs | None], Tile]

    def template_for(self, plan: FusionPlan, gi: int, hw: HardwareSpec | None = None) -> type[Tile]:
        """The template that tiles group ``gi``."""
        for template in self.kinds:
            if template.applies(plan, gi, hw):
                return template
        raise AssertionError(f"no tile template for a {plan.groups[gi].kind} group")

    def space(self, plan: FusionPlan, gi: int, hw: HardwareSpec) -> TilingSpace:
        """Group ``gi``'s tiling space on ``hw``: its template's."""
        return self.template_for(plan, gi, hw).space(plan, gi, hw)

    def tile_of(self, plan: FusionPlan, gi: int, tiling: Tiling | Tile | None,
                hw: HardwareSpec | None = None) -> Tile | None:
        """The typed tile of group ``gi``'s tiling: the one it was enumerated with, else (a Tiling built by
        hand) its values read by the template that applies to the group, defaults for what they lack. None
        for no tiling, or one without values."""
        if tiling is None or isinstance(tiling, Tile):
            return tiling
        if tiling.typed is not None:
            return tiling.typed
        if not tiling.values:
            return None
        return self.template_for(plan, gi, hw).of(tiling.values, knobs(hw) if hw is not None else None)

    def recover(self, kind: str | None, values: Values, hw: HardwareSpec | None = None) -> Tile:
        """The typed tile of a tiling read back from storage (a manifest or a table keeps the fusion group's
        kind and the values); ``kind`` None: by the values' names alone."""
        return self.decode(kind, values, knobs(hw) if hw is not None else None)
