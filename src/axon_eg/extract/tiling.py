"""Symbolic tiling: tile parameters per fusion group, constrained by the hardware description.

Each group gets named parameters (``BLOCK_M``, ``TILE_N``, ``num_warps``, ...) with candidate values
and constraints read from ``data/hw_costs`` (never numbers in code): on-chip capacity per block or per
partition including multi-buffering, partition and matmul tile limits, PSUM banks, powers of two for
Triton block shapes. Remainders are handled by masking, so sizes need not divide. ``tilings``
enumerates every feasible assignment and prunes dominated ones (same tile shape with less
pipelining, or a smaller reduction tile that fits as well).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

from axon_eg.hw import HardwareSpec
from axon_eg.ir import ops as O

from .fusion import ATTENTION, MATMUL, REDUCTION, FusionPlan

FP32 = 4


@dataclass(frozen=True)
class Constraint:
    name: str
    text: str
    holds: Callable[[dict[str, int | str]], bool]


@dataclass(frozen=True)
class TilingSpace:
    group: int
    kind: str
    dims: tuple[tuple[str, int], ...]  # the group's problem sizes: M, N, K, rows, cols, ...
    params: tuple[tuple[str, tuple], ...]
    constraints: tuple[Constraint, ...]

    def size(self) -> int:
        return math.prod(len(v) for _, v in self.params)


@dataclass(frozen=True)
class Tiling:
    group: int
    values: tuple[tuple[str, int | str], ...]

    def __getitem__(self, key: str) -> int | str:
        return dict(self.values)[key]

    def get(self, key: str, default: int | str | None = None) -> int | str | None:
        return dict(self.values).get(key, default)


def pow2(lo: int, hi: int) -> tuple[int, ...]:
    out, v = [], 1
    while v <= hi:
        if v >= lo:
            out.append(v)
        v *= 2
    return tuple(out)


def _dims(plan: FusionPlan, gi: int) -> dict[str, int]:
    """Problem sizes of a group from its anchor node's concrete shapes."""
    program = plan.program
    group = plan.groups[gi]
    anchor = group.anchor(program)
    node = program.nodes[anchor]
    if node.op == "matmul":
        a, b = (program.concrete_shape(j) for j in node.inputs)
        out = program.concrete_shape(anchor)
        return {"M": a[-2], "N": b[-1], "K": a[-1], "BATCH": math.prod(out[:-2])}
    shape = program.concrete_shape(node.inputs[0] if node.inputs and group.kind == REDUCTION else anchor)
    cols = shape[-1] if shape else 1
    return {"ROWS": max(1, math.prod(shape[:-1])) if shape else 1, "COLS": cols}


def _itemsize(plan: FusionPlan, gi: int) -> int:
    program = plan.program
    return max(program.nodes[n].dtype.itemsize for n in plan.groups[gi].nodes)


def space(plan: FusionPlan, gi: int, hw: HardwareSpec) -> TilingSpace:
    kind = plan.groups[gi].kind
    dims = _dims(plan, gi)
    item = _itemsize(plan, gi)
    # tiles held on chip at once: the tensors the group reads and writes (a scalar constant takes no tile)
    program = plan.program
    tensors = [j for j in plan.inputs_of(gi) + plan.outputs_of(gi) if math.prod(program.concrete_shape(j)) > 1]
    live = max(2, len(tensors))
    if hw.kind == "trainium":
        params, constraints = _trainium(kind, dims, item, live, hw)
    elif kind == MATMUL and dims["N"] < 16 and reduced_operand(plan, gi):
        params, constraints = _split_k(dims, hw)
    else:
        params, constraints = _gpu(kind, dims, item, live, hw)
    return TilingSpace(gi, kind, tuple(sorted(dims.items())), tuple(params), tuple(constraints))


def reduced_operand(plan: FusionPlan, gi: int) -> bool:
    """A GEMV whose vector is a reduction inside the same group (``x @ sum(W, -1)`` after the νGraph moved
    the reduction into B): the backend splits it over K (program p reduces its rows of W, then streams the
    same columns of x), so its tiling is a K slice per program and a streamed tile width."""
    program = plan.program
    group = set(plan.groups[gi].nodes)
    for n in group:
        node = program.nodes[n]
        if node.op == "matmul":
            b = node.inputs[1]
            return b in group and O.get(program.nodes[b].op).kind is O.OpKind.REDUCE
    return False


def _split_k(dims: dict[str, int], hw: HardwareSpec):
    warps = tuple(hw.value("knobs.num_warps"))
    warp_size = max(hw.value("knobs.warp_size"))
    per_thread = int(hw.get("memory.registers.per_thread") or 128)
    longest = max(dims["M"], dims["K"])
    params = [("SPLIT_K", (16, 32, 64)), ("BLOCK_R", pow2(128, 2048)), ("num_warps", warps)]
    constraints = [
        Constraint("tile per program", "num_warps*256 <= SPLIT_K*BLOCK_R <= 32768",
                   lambda t: t["num_warps"] * 256 <= t["SPLIT_K"] * t["BLOCK_R"] <= 32768),
        Constraint("registers per thread", f"SPLIT_K*BLOCK_R fp32 / (num_warps*{warp_size}) <= {per_thread} / 2",
                   lambda t: t["SPLIT_K"] * t["BLOCK_R"] <= t["num_warps"] * warp_size * per_thread // 2),
        Constraint("no oversized tiles", f"BLOCK_R <= max(128, {longest} rounded up), SPLIT_K <= max(16, K)",
                   lambda t: t["BLOCK_R"] <= max(128, 1 << math.ceil(math.log2(max(1, longest))))
                   and t["SPLIT_K"] <= max(16, 1 << math.ceil(math.log2(max(1, dims["K"]))))),
    ]
    return params, constraints


def _gpu(kind: str, dims: dict[str, int], item: int, live: int, hw: HardwareSpec):
    warps = tuple(hw.value("knobs.num_warps"))
    warp_size = max(hw.value("knobs.warp_size"))
    smem = hw.value("memory.shared.per_block")
    regs = hw.value("memory.registers.per_sm")
    per_thread = int(hw.get("memory.registers.per_thread") or 128)  # without the fact: a conservative cap
    stages = tuple(range(int(hw.value("knobs.num_stages.min")), int(hw.value("knobs.num_stages.max")) + 1))
    extra: list[tuple[str, tuple]] = []
    if hw.get("knobs.grf_mode") is not None:
        extra.append(("grf_mode", tuple(hw.value("knobs.grf_mode"))))
    if kind == ATTENTION:  # flash attention: BLOCK_N keys per step, the whole head dim on chip (N: value head dim)
        head = max(16, 1 << math.ceil(math.log2(max(1, dims["N"]))))
        params = [("BLOCK_M", pow2(16, 256)), ("BLOCK_N", pow2(16, 256)), ("BLOCK_K", (head,)), ("num_warps", warps),
                  ("num_stages", stages), *extra]  # BLOCK_K: the padded head dim (the cost model reads it)
        constraints = [
            Constraint("shared memory (as a matmul)", f"(BM*BK + BK*BN) * {item} B * stages <= {smem} B",
                       lambda t: (t["BLOCK_M"] * t["BLOCK_K"] + t["BLOCK_K"] * t["BLOCK_N"]) * item * t["num_stages"] <= smem),
            Constraint("shared memory", f"(BM*{head} + stages*BN*2*{head} + BM*BN) * {item} B <= {smem} B",
                       lambda t: (t["BLOCK_M"] * head + t["num_stages"] * t["BLOCK_N"] * 2 * head
                                  + t["BLOCK_M"] * t["BLOCK_N"]) * item <= smem),
            Constraint("registers per thread", f"(BM*BN + BM*{head}) fp32 / (num_warps*{warp_size}) <= {per_thread}",
                       lambda t: t["BLOCK_M"] * (t["BLOCK_N"] + head) <= t["num_warps"] * warp_size * per_thread),
            Constraint("warp tiles", "BM >= num_warps * 16", lambda t: t["BLOCK_M"] >= t["num_warps"] * 16),
            Constraint("no oversized key block", f"BN <= max(16, K={dims['K']} keys rounded up to 16)",
                       lambda t: t["BLOCK_N"] <= max(16, 1 << max(4, math.ceil(math.log2(max(1, dims["K"])))))),
        ]
        return params, constraints
    if kind == MATMUL and dims["N"] < 16:  # a GEMV (the νGraph moved a reduction into the operand): streamed
        # A tiles reduced against a thin B without tl.dot; thin row bands, long K tiles, enough loads in flight
        params = [("BLOCK_M", pow2(1, 64)), ("BLOCK_N", (max(1, 1 << math.ceil(math.log2(max(1, dims["N"])))),)),
                  ("BLOCK_K", pow2(64, 1024)), ("num_warps", warps), ("num_stages", (stages[0],)), *extra]
        constraints = [
            Constraint("tile per program", "num_warps*256 <= BM*BK <= 16384",
                       lambda t: t["num_warps"] * 256 <= t["BLOCK_M"] * t["BLOCK_K"] <= 16384),
            Constraint("no oversized K tile", f"BK <= max(64, K={dims['K']} rounded up)",
                       lambda t: t["BLOCK_K"] <= max(64, 1 << math.ceil(math.log2(max(1, dims["K"]))))),
        ]
        return params, constraints
    if kind == MATMUL:
        params = [("BLOCK_M", pow2(16, 256)), ("BLOCK_N", pow2(16, 256)), ("BLOCK_K", pow2(16, 128)),
                  ("num_warps", warps), ("num_stages", stages), *extra]
        constraints = [
            Constraint("shared memory", f"(BM*BK + BK*BN) * {item} B * stages <= {smem} B",
                       lambda t: (t["BLOCK_M"] * t["BLOCK_K"] + t["BLOCK_K"] * t["BLOCK_N"]) * item * t["num_stages"] <= smem),
            Constraint("accumulator registers", f"BM*BN*4 B <= registers per SM {regs} B / 2",
                       lambda t: t["BLOCK_M"] * t["BLOCK_N"] * FP32 <= regs // 2),
            Constraint("warp tiles", "BM*BN >= num_warps * 16*16",
                       lambda t: t["BLOCK_M"] * t["BLOCK_N"] >= t["num_warps"] * 256),
            Constraint("no oversized K tile", f"BK <= max(16, K={dims['K']} rounded up to 16)",
                       lambda t: t["BLOCK_K"] <= max(16, 1 << max(4, math.ceil(math.log2(max(1, dims["K"])))))),
        ]
        return params, constraints
    if kind == REDUCTION:
        cols = dims["COLS"]
        params = [("BLOCK_N", pow2(16, max(16, 1 << math.ceil(math.log2(max(1, cols)))))),
                  ("ROWS_PER_PROGRAM", (1, 2, 4, 8)), ("num_warps", warps), *extra]
        constraints = [
            Constraint("registers", f"ROWS*BLOCK_N*4 B*{live} live <= {regs} B / 2",
                       lambda t: t["ROWS_PER_PROGRAM"] * t["BLOCK_N"] * FP32 * live <= regs // 2),
            Constraint("registers per thread", f"ROWS*BLOCK_N*{live} live / (num_warps*{warp_size}) <= {per_thread} / 2",
                       lambda t: t["ROWS_PER_PROGRAM"] * t["BLOCK_N"] * live <= t["num_warps"] * warp_size * per_thread // 2),
            Constraint("threads have work", f"ROWS*BLOCK_N >= num_warps*{warp_size}",
                       lambda t: t["ROWS_PER_PROGRAM"] * t["BLOCK_N"] >= t["num_warps"] * warp_size),
        ]
        return params, constraints
    total = dims["ROWS"] * dims["COLS"]
    params = [("BLOCK", pow2(128, max(128, min(16384, 1 << math.ceil(math.log2(max(1, total))))))),
              ("num_warps", warps), *extra]
    constraints = [
        Constraint("threads have work", f"BLOCK >= num_warps*{warp_size}",
                   lambda t: t["BLOCK"] >= t["num_warps"] * warp_size),
        Constraint("registers", f"BLOCK*4 B*{live} live <= {regs} B / 2",
                   lambda t: t["BLOCK"] * FP32 * live <= regs // 2),
        Constraint("registers per thread", f"BLOCK*{live} live / (num_warps*{warp_size}) <= {per_thread} / 2",
                   lambda t: t["BLOCK"] * live <= t["num_warps"] * warp_size * per_thread // 2),
    ]
    return params, constraints


def _trainium(kind: str, dims: dict[str, int], item: int, live: int, hw: HardwareSpec):
    pmax = int(hw.value("limits.partition_max"))
    sbuf = hw.value("memory.sbuf.per_partition")
    bank = hw.value("memory.psum.bank")
    banks = int(hw.value("memory.psum.banks"))
    if kind in (MATMUL, ATTENTION):
        kmax = int(hw.value("limits.matmul.contraction_max"))
        smax = int(hw.value("limits.matmul.stationary_free_max"))
        mmax = int(hw.value("limits.matmul.moving_free_max"))
        groups = int(hw.value("limits.matmul.accumulation_groups"))
        params = [("TILE_K", pow2(32, 512)), ("TILE_M", pow2(32, 512)), ("TILE_N", pow2(64, 2048)),
                  ("BLOCK_M", (1, 2, 4, 8)), ("BLOCK_N", (1, 2, 4, 8))]
        constraints = [
            Constraint("partition dim", f"TILE_K <= partitions {pmax} and contraction limit {kmax}",
                       lambda t: t["TILE_K"] <= min(pmax, kmax)),
            Constraint("stationary tile", f"TILE_M <= {smax}", lambda t: t["TILE_M"] <= smax),
            Constraint("moving tile", f"TILE_N <= {mmax}", lambda t: t["TILE_N"] <= mmax),
            Constraint("PSUM bank", f"TILE_N * 4 B <= bank {bank} B", lambda t: t["TILE_N"] * FP32 <= bank),
            Constraint("accumulation groups", f"BLOCK_M*BLOCK_N <= min({groups} groups, {banks} banks)",
                       lambda t: t["BLOCK_M"] * t["BLOCK_N"] <= min(groups, banks)),
            Constraint("SBUF per partition", f"2 buffers * (BM*TM + BN*TN) * {item} B <= {sbuf} B",
                       lambda t: 2 * (t["BLOCK_M"] * t["TILE_M"] + t["BLOCK_N"] * t["TILE_N"]) * item <= sbuf),
        ]
        return params, constraints
    free_max = int(hw.value("limits.vector.free_max_sbuf"))
    params = [("TILE_P", pow2(1, pmax * 2)), ("TILE_F", pow2(64, 65536))]
    constraints = [
        Constraint("partition dim", f"TILE_P <= {pmax}", lambda t: t["TILE_P"] <= pmax),
        Constraint("vector free size", f"TILE_F <= {free_max}", lambda t: t["TILE_F"] <= free_max),
        Constraint("SBUF per partition", f"2 buffers * {live} tiles * TILE_F * {item} B <= {sbuf} B",
                   lambda t: 2 * live * t["TILE_F"] * item <= sbuf),
    ]
    if kind == REDUCTION:  # a row must fit one tile's free dim, or be reduced in passes
        constraints.append(Constraint("row in passes", "TILE_F <= next power of two >= COLS",
                                      lambda t: t["TILE_F"] <= max(64, 1 << math.ceil(math.log2(max(1, dims["COLS"]))))))
    return params, constraints


COALESCED_COLS = 64  # inner columns per program of a scan over a non-last axis: 128 B rows of bf16
MIN_COLS = 16  # 32 B of bf16: one DRAM sector per row of the tile
TARGET_PROGRAMS = 256  # a line is one program's sweep, so a column scan needs many strips to fill the SMs


def _next_pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def scan_split(shape: tuple[int, ...], axis: int, values: dict[str, int | str]) -> tuple[int, int, int]:
    """How a scan group's ``BLOCK`` splits into ``CHUNK`` (along the scanned axis) x ``LINES`` (rows, or
    inner columns when the scanned axis is not the last) and how many programs that launches; ``CHUNK``
    and ``LINES`` in ``values`` override the split. Shared by the Triton scan lowering and the cost model."""
    outer, length, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    block = int(values.get("BLOCK", 1024))
    if inner > 1:  # coalescing wants rows of LINES contiguous columns; the rest of BLOCK goes down the axis
        lines = min(_next_pow2(inner), COALESCED_COLS, block)
        while lines > MIN_COLS and outer * math.ceil(inner / lines) < TARGET_PROGRAMS:
            lines //= 2  # narrower column strips: more programs to fill the SMs, still whole 32 B sectors
        chunk = min(_next_pow2(length), max(1, block // lines))
    else:  # rows: the whole line in one chunk when it fits, several lines per program when it is short
        chunk = min(_next_pow2(length), block)
        lines = min(_next_pow2(outer), max(1, block // chunk))
    chunk, lines = int(values.get("CHUNK", chunk)), int(values.get("LINES", lines))
    programs = outer * math.ceil(inner / lines) if inner > 1 else math.ceil(outer / lines)
    return chunk, lines, programs


def feasible(space: TilingSpace, assignment: dict[str, int | str]) -> list[str]:
    """Names of the constraints an assignment violates (empty: feasible)."""
    return [c.name for c in space.constraints if not c.holds(assignment)]


def tilings(space: TilingSpace, limit: int | None = None) -> tuple[list[Tiling], dict[str, int]]:
    """Feasible, non-dominated assignments (deterministic order) and counts of what was pruned."""
    names = [n for n, _ in space.params]
    feasible_list = []
    considered = 0
    for values in itertools.product(*(v for _, v in space.params)):
        considered += 1
        t = dict(zip(names, values))
        if not feasible(space, t):
            feasible_list.append(t)
    kept = _prune(feasible_list)
    stats = {"considered": considered, "feasible": len(feasible_list), "kept": len(kept)}
    if limit is not None:
        kept = kept[:limit]
    return [Tiling(space.group, tuple(t.items())) for t in kept], stats


def _prune(candidates: list[dict]) -> list[dict]:
    """Drop an assignment when another equal in every parameter but a reduction tile (BLOCK_K,
    TILE_K) has a larger value there: longer K tiles that still fit never lose on a roofline.
    ``num_stages`` is not monotone: on the H200 a 128x128x64 matmul tile ran at 0.91x of cuBLAS with
    3 stages and 0.86x with 5, and flash attention was fastest with 2 (the tie-breaks pick them)."""
    if not candidates:
        return []
    monotone = [k for k in ("BLOCK_K", "TILE_K") if k in candidates[0]]
    if not monotone:
        return candidates
    best: dict[tuple, dict] = {}
    for t in candidates:
        key = tuple((k, v) for k, v in t.items() if k not in monotone)
        cur = best.get(key)
        if cur is None or tuple(t[k] for k in monotone) > tuple(cur[k] for k in monotone):
            best[key] = t
    return list(best.values())
