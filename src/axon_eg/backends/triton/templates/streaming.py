"""GPU templates of memory-bound groups: element-wise (and library epilogues), layout, scan and row
reductions.

- ``ElementwiseTile(BLOCK, num_warps)``: ``BLOCK`` output elements per program (``tiles.elementwise.block``,
  capped at the group's elements), ``ceil(elements / BLOCK)`` programs.
- ``LayoutTile``: the element-wise space; a tiled transpose takes a square ``TILE`` x ``TILE`` tile out of
  ``BLOCK`` (``square``) unless ``TILE`` is given.
- ``ScanTile``: the element-wise space; ``split`` turns ``BLOCK`` into ``CHUNK`` elements along the
  scanned axis x ``LINES`` lines per program (shared by the Triton scan lowering and the cost model).
- ``RowsTile(BLOCK_N, ROWS_PER_PROGRAM, num_warps)``: ``ROWS_PER_PROGRAM`` rows per program, each in
  ``BLOCK_N`` chunks (``tiles.rows.*``, capped at the row); ``BLOCK_N`` None is the whole row.

Their tie-break prefers whole rows in one block (one pass over HBM, nothing re-read), then about 16
elements per thread (a few 128-bit loads each: enough loads in flight without spilling registers), then
more elements per program.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from axon_eg.extract.fusion import ELEMENTWISE, LAYOUT, LIBRARY, REDUCTION, SCAN, FusionPlan
from axon_eg.extract.templates.base import (
    FP32,
    Constraint,
    GpuTile,
    GroupFacts,
    gpu_facts,
    group_dims,
    next_pow2,
    streams,
    tile_range,
)
from axon_eg.hw import HardwareSpec
from axon_eg.ir import ops as O

COALESCED_COLS = 64  # inner columns per program of a scan over a non-last axis: 128 B rows of bf16
MIN_COLS = 16  # 32 B of bf16: one DRAM sector per row of the tile
TARGET_PROGRAMS = 256  # a line is one program's sweep, so a column scan needs many strips to fill the SMs
MIN_TILE = 16  # a transpose tile's smallest edge: one 32 B sector of bf16 per tile row
MIN_ROW_BLOCK = 16  # a row chunk's smallest size: 32 B of bf16
SPLIT_MIN_COLS = 65536  # a row this long or longer may be split across programs (RowsTile.SPLIT)


def _stream_tie_break(block_n: int | None, elems: int, num_warps: int, warp_size: int,
                      per_thread_log2: float = 4) -> tuple[float, ...]:
    per_thread = elems / (num_warps * warp_size)
    return (0 if block_n is None else -block_n, abs(math.log2(max(per_thread, 1e-9)) - per_thread_log2), -elems)


ELEMENTWISE_PER_THREAD = 4
"""Elements per thread an element-wise block is ranked best at: one 16-byte fp32 vector. Measured on the H200
(benchmarks/tile_sweep.py, 2026-12-04; that session was cut off before its sweep files were committed, the
numbers are as it recorded them here): a ReLU over 154M fp32 ran 291-293 us at 4 per thread (BLOCK 512 / 4
warps, 1024 / 8, 2048 / 16), 299-307 at 8-32 (8192 / 16 warps: 303), a softsign 370-374 against 380-391."""


@dataclass(frozen=True, kw_only=True)
class ElementwiseTile(GpuTile):
    """One 1-D block of ``BLOCK`` output elements per program."""

    kind: ClassVar[str] = "elementwise"
    BLOCK: int = 1024

    @classmethod
    def applies(cls, plan: FusionPlan, gi: int, hw: HardwareSpec | None) -> bool:
        return plan.groups[gi].kind in (ELEMENTWISE, LIBRARY)

    @classmethod
    def params(cls, facts: GroupFacts, hw: HardwareSpec):
        g = gpu_facts(hw)
        total = facts.dims["ROWS"] * facts.dims["COLS"]
        live, ws, regs, pt = facts.live, g.warp_size, g.regs, g.per_thread
        params = [("BLOCK", tile_range(hw, "elementwise.block", next_pow2(total))), ("num_warps", g.warps), *g.extra]
        constraints = [
            Constraint("threads have work", f"BLOCK >= num_warps*{ws}",
                       lambda t: t["BLOCK"] >= t["num_warps"] * ws),
            Constraint("registers", f"BLOCK*4 B*{live} live <= {regs} B / 2",
                       lambda t: t["BLOCK"] * FP32 * live <= regs // 2),
            Constraint("registers per thread", f"BLOCK*{live} live / (num_warps*{ws}) <= {pt} / 2",
                       lambda t: t["BLOCK"] * live <= t["num_warps"] * ws * pt // 2),
        ]
        return params, constraints

    def programs(self, plan: FusionPlan, gi: int) -> int:
        program = plan.program
        shape = program.concrete_shape(plan.groups[gi].anchor(program))
        return math.ceil(max(1, math.prod(shape)) / self.BLOCK)

    def tie_break(self, warp_size: int) -> tuple[float, ...]:
        target = math.log2(ELEMENTWISE_PER_THREAD) if type(self) is ElementwiseTile else 4
        return _stream_tie_break(None, self.BLOCK, self.num_warps, warp_size, target)

    def in_flight(self, plan: FusionPlan, gi: int) -> tuple[int, int, int]:
        return (self.BLOCK, *streams(plan, gi))


@dataclass(frozen=True, kw_only=True)
class LayoutTile(ElementwiseTile):
    """A layout group: the element-wise space; a tiled transpose moves ``TILE`` x ``TILE`` tiles."""

    kind: ClassVar[str] = "layout"
    TILE: int | None = None  # the transpose tile's edge; None: from BLOCK (``square``)

    @classmethod
    def applies(cls, plan: FusionPlan, gi: int, hw: HardwareSpec | None) -> bool:
        return plan.groups[gi].kind == LAYOUT

    def square(self) -> int:
        """The transpose tile's edge: ``sqrt(BLOCK)`` rounded down to a power of two, at least ``MIN_TILE``
        (``TILE * TILE <= BLOCK`` keeps the space's register constraints, checked on BLOCK, valid)."""
        if self.TILE is not None:
            return self.TILE
        return max(MIN_TILE, 1 << (max(1, self.BLOCK).bit_length() - 1) // 2)


@dataclass(frozen=True, kw_only=True)
class ScanTile(ElementwiseTile):
    """A scan group: the element-wise space; ``BLOCK`` splits into ``CHUNK`` x ``LINES`` (``split``)."""

    kind: ClassVar[str] = "scan"
    CHUNK: int | None = None  # elements along the scanned axis per step; None: from BLOCK
    LINES: int | None = None  # lines (rows, or inner columns) per program; None: from BLOCK
    SPLIT: int = 1
    """Segments per line (few long lines along the last axis): a first launch folds each segment, a second
    sweeps it from the earlier segments' fold (the Triton scan lowering's ``_split_lower``)."""
    LOOKBACK: int = 0
    """1: few long lines along the last axis in one pass, one ``BLOCK`` tile of a line per program, the earlier
    tiles' fold found by a decoupled look-back (``_lookback_lower``): the input is read once."""

    @classmethod
    def applies(cls, plan: FusionPlan, gi: int, hw: HardwareSpec | None) -> bool:
        return plan.groups[gi].kind == SCAN

    @classmethod
    def params(cls, facts: GroupFacts, hw: HardwareSpec):
        params, constraints = super().params(facts, hw)
        d = facts.dims
        lines, length = d.get("SCAN_LINES", 0), d.get("SCAN_LENGTH", 0)
        if (hw.get("tiles.rows.split") is None or d.get("SCAN_INNER", 2) != 1 or lines >= hw.value("compute.units")
                or length < SPLIT_MIN_COLS):
            return params, constraints
        units = int(hw.value("compute.units"))
        params = [*params, ("SPLIT", (1, *tile_range(hw, "rows.split"))), ("LOOKBACK", (0, 1))]
        constraints = [*constraints,
                       Constraint("a look-back scan is not split", "LOOKBACK = 0 or SPLIT = 1",
                                  lambda t: not t.get("LOOKBACK", 0) or t.get("SPLIT", 1) == 1),
                       Constraint("split segments of at least 4 blocks", f"SPLIT * BLOCK * 4 <= LENGTH={length}",
                                  lambda t: t.get("SPLIT", 1) == 1 or t["SPLIT"] * t["BLOCK"] * 4 <= length),
                       Constraint("split programs at most 8 waves", f"LINES={lines} * SPLIT <= 8 * {units}",
                                  lambda t: lines * t.get("SPLIT", 1) <= 8 * units)]
        return params, constraints

    @property
    def launches(self) -> int:  # type: ignore[override]
        return 2 if self.SPLIT > 1 or self.LOOKBACK else 1  # a look-back's scratch is zeroed first

    def scratch_bytes(self, plan: FusionPlan, gi: int) -> int:
        """Split: one fp32 partial per line and segment, written by the first launch, read by the second.
        Look-back: one 64-bit word per tile, zeroed, published twice and read by the later tiles' look-back."""
        if self.LOOKBACK:
            d = group_dims(plan, gi)
            chunk = self.CHUNK if self.CHUNK is not None else self.BLOCK
            return d.get("SCAN_LINES", 1) * math.ceil(d.get("SCAN_LENGTH", 1) / chunk) * 8 * 4
        return 0 if self.SPLIT == 1 else group_dims(plan, gi).get("SCAN_LINES", 1) * self.SPLIT * FP32 * 2

    def split(self, shape: tuple[int, ...], axis: int) -> tuple[int, int, int]:
        """How ``BLOCK`` splits into ``CHUNK`` (along the scanned axis) x ``LINES`` (rows, or inner columns
        when the scanned axis is not the last) and how many programs that launches; ``CHUNK`` and
        ``LINES`` override the split."""
        outer, length, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
        block = self.BLOCK
        if inner > 1:  # coalescing wants rows of LINES contiguous columns; the rest of BLOCK goes down the axis
            lines = min(next_pow2(inner), COALESCED_COLS, block)
            while lines > MIN_COLS and outer * math.ceil(inner / lines) < TARGET_PROGRAMS:
                lines //= 2  # narrower column strips: more programs to fill the SMs, still whole 32 B sectors
            chunk = min(next_pow2(length), max(1, block // lines))
        else:  # rows: the whole line in one chunk when it fits, several lines per program when it is short
            chunk = min(next_pow2(length), block)
            lines = min(next_pow2(outer), max(1, block // chunk))
        chunk = self.CHUNK if self.CHUNK is not None else chunk
        lines = self.LINES if self.LINES is not None else lines
        if self.LOOKBACK and inner == 1:  # one tile of one line per program
            chunk = self.CHUNK if self.CHUNK is not None else min(next_pow2(length), block)
            return chunk, 1, outer * math.ceil(length / chunk)
        programs = outer * math.ceil(inner / lines) if inner > 1 else math.ceil(outer / lines)
        return chunk, lines, programs

    def programs(self, plan: FusionPlan, gi: int) -> int:
        program = plan.program
        anchor = plan.groups[gi].anchor(program)
        if program.nodes[anchor].kind is not O.OpKind.SCAN:  # cumsum and cumprod sweep alike
            return super().programs(plan, gi)
        axis = int(program.nodes[anchor].attrs["axis"])
        return self.split(program.concrete_shape(anchor), axis)[2] * self.SPLIT  # one sweep per program


@dataclass(frozen=True, kw_only=True)
class RowsTile(GpuTile):
    """``ROWS_PER_PROGRAM`` rows per program, each in ``BLOCK_N`` chunks (None: the whole row)."""

    kind: ClassVar[str] = "rows"
    BLOCK_N: int | None = None
    ROWS_PER_PROGRAM: int = 1
    SPLIT: int = 1
    """Programs per row block, each reducing a contiguous slice of the row's columns (few, long rows: a
    full reduction to one scalar is one row); a second launch combines their fp32 partials in slice order
    (deterministic) and computes what the group derives from the reductions."""

    @classmethod
    def applies(cls, plan: FusionPlan, gi: int, hw: HardwareSpec | None) -> bool:
        return plan.groups[gi].kind == REDUCTION

    @classmethod
    def params(cls, facts: GroupFacts, hw: HardwareSpec):
        g = gpu_facts(hw)
        live, ws, regs, pt = facts.live, g.warp_size, g.regs, g.per_thread
        inner = facts.dims.get("INNER", 1)  # a column reduction: a program's rows are contiguous output elements
        rows = (tile_range(hw, "rows.column_rows", next_pow2(inner)) if inner > 1 and hw.get("tiles.rows.column_rows")
                else tile_range(hw, "rows.rows_per_program"))
        params = [("BLOCK_N", tile_range(hw, "rows.block_n", next_pow2(facts.dims["COLS"]))),
                  ("ROWS_PER_PROGRAM", rows), ("num_warps", g.warps), *g.extra]
        splits = cls.split_values(facts, hw)
        if splits != (1,):
            params.append(("SPLIT", splits))
        constraints = [
            Constraint("registers", f"ROWS*BLOCK_N*4 B*{live} live <= {regs} B / 2",
                       lambda t: t["ROWS_PER_PROGRAM"] * t["BLOCK_N"] * FP32 * live <= regs // 2),
            Constraint("registers per thread", f"ROWS*BLOCK_N*{live} live / (num_warps*{ws}) <= {pt} / 2",
                       lambda t: t["ROWS_PER_PROGRAM"] * t["BLOCK_N"] * live <= t["num_warps"] * ws * pt // 2),
            Constraint("threads have work", f"ROWS*BLOCK_N >= num_warps*{ws}",
                       lambda t: t["ROWS_PER_PROGRAM"] * t["BLOCK_N"] >= t["num_warps"] * ws),
        ]
        if splits != (1,):
            rows, cols, units = facts.dims["ROWS"], facts.dims["COLS"], int(hw.value("compute.units"))
            constraints += [
                Constraint("split slices of at least 4 chunks", f"SPLIT * BLOCK_N * 4 <= COLS={cols}",
                           lambda t: t.get("SPLIT", 1) == 1 or t["SPLIT"] * t["BLOCK_N"] * 4 <= cols),
                Constraint("split programs at most 8 waves", f"ceil(ROWS={rows} / ROWS_PER_PROGRAM) * SPLIT <= 8 * {units}",
                           lambda t: t.get("SPLIT", 1) == 1
                           or math.ceil(rows / t["ROWS_PER_PROGRAM"]) * t["SPLIT"] <= 8 * units),
            ]
        return params, constraints

    @staticmethod
    def split_values(facts: GroupFacts, hw: HardwareSpec) -> tuple[int, ...]:
        """1, and the hardware file's split range (``tiles.rows.split``) when the group has fewer rows than
        the GPU has SMs and rows of at least ``SPLIT_MIN_COLS`` columns."""
        d = facts.dims
        if hw.get("tiles.rows.split") is None or d["ROWS"] >= hw.value("compute.units") or d["COLS"] < SPLIT_MIN_COLS:
            return (1,)
        return (1, *tile_range(hw, "rows.split"))

    @property
    def launches(self) -> int:  # type: ignore[override]
        return 2 if self.SPLIT > 1 else 1

    def scratch_bytes(self, plan: FusionPlan, gi: int) -> int:
        """Split: each reduction's fp32 partials of every slice (a Welford pair's three: count, mean, squared
        deviations; a logsumexp's two: max and exp-sum), written by the first launch, read by the second."""
        if self.SPLIT == 1:
            return 0
        program = plan.program
        nodes = [program.nodes[n].op for n in plan.groups[gi].nodes]
        reductions = sum(1 for op in nodes if O.get(op).kind is O.OpKind.REDUCE) + nodes.count("logsumexp")
        return (reductions + len(plan.welford_pairs(gi))) * group_dims(plan, gi)["ROWS"] * self.SPLIT * FP32 * 2

    def row_block(self, cols: int) -> int:
        """The chunk of a row of ``cols`` columns: ``BLOCK_N``, else the whole row rounded up to a power of
        two (at least ``MIN_ROW_BLOCK``)."""
        return self.BLOCK_N if self.BLOCK_N is not None else max(MIN_ROW_BLOCK, next_pow2(cols))

    def programs(self, plan: FusionPlan, gi: int) -> int:
        return math.ceil(group_dims(plan, gi)["ROWS"] / self.ROWS_PER_PROGRAM) * self.SPLIT

    def tie_break(self, warp_size: int) -> tuple[float, ...]:
        elems = (self.BLOCK_N or 1) * self.ROWS_PER_PROGRAM
        return _stream_tie_break(self.BLOCK_N, elems, self.num_warps, warp_size)

    def in_flight(self, plan: FusionPlan, gi: int) -> tuple[int, int, int]:
        cols = group_dims(plan, gi)["COLS"]
        return (self.ROWS_PER_PROGRAM * min(self.row_block(cols), cols), *streams(plan, gi))
