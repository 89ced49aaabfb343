"""The Trainium cost model (``NKI.cost``): a timeline over the engine queues (DMA in, DMA out, Tensor,
Vector, Scalar, GpSimd). Each group becomes DMA-in, compute and DMA-out work items; a work item starts when
its engine is free and its inputs are done, so independent branches overlap (RMSNorm's reduction on the
Vector engine while a matmul runs on the Tensor engine). A work item's seconds are the declared latency model
(``semantics/isa/declarations.py``, evaluated by ``extract/latency.py``) of the instruction it runs as, on
its engine: ``load``/``store`` for the DMAs, ``nc_matmul`` per tile for the matmul, and per node
``activation`` (Scalar), ``tensor_reduce`` or ``tensor_scalar`` (Vector) -- see ``_instruction``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from axon_eg.extract.cost import CostReport, GroupCost, Interval, group_traffic
from axon_eg.extract.fusion import LAYOUT, MATMUL, REDUCTION, FusionPlan, node_kind
from axon_eg.extract.latency import engine_seconds, model_cycles, model_seconds
from axon_eg.extract.templates import Tiling
from axon_eg.hw import HardwareSpec
from axon_eg.ir import ops as O
from axon_eg.semantics.isa.declarations import DMA, TENSOR, declaration

from .templates import TEMPLATES, TrnMatmulTile

_ACTIVATIONS = frozenset(O.activations())  # on the Scalar engine; the rest on the Vector engine


def _instruction(op: str, kind: str) -> str:
    """The instruction a node's work is priced as (its declared latency model, on its first engine): an
    activation on the Scalar engine, a row reduction ``tensor_reduce``, any other element-wise op
    ``tensor_scalar`` on the Vector engine -- one input stream for every node, as the model has always priced
    them (a binary op of two full tiles runs as ``tensor_tensor``, whose declared model counts two)."""
    if op in _ACTIVATIONS:
        return "activation"
    return "tensor_reduce" if kind == REDUCTION else "tensor_scalar"


def _vector_seconds(plan: FusionPlan, nodes: Sequence[int], hw: HardwareSpec) -> dict[str, float]:
    """Vector / Scalar engine seconds of element-wise and reduction nodes: each node's instruction
    (``_instruction``) on the node's elements spread over the partitions."""
    program = plan.program
    out = {"vector": 0.0, "scalar": 0.0}
    for n in nodes:
        node = program.nodes[n]
        kind = node_kind(node.op)
        if kind is None or kind in (MATMUL, LAYOUT):
            continue
        src = node.inputs[0] if kind == REDUCTION and node.inputs else n
        elements = math.prod(program.concrete_shape(src))
        instruction = declaration(_instruction(node.op, kind))
        engine = instruction.engines[0]
        out[engine] += model_seconds(instruction.latency[engine], engine, hw,
                                     free=elements / hw.value("limits.partition_max"))
    return {e: v for e, v in out.items() if v}


def trainium_engine_work(plan: FusionPlan, gi: int, t: Tiling | None, hw: HardwareSpec
                         ) -> tuple[float, list[tuple[str, str, float]], float]:
    """(DMA seconds each way, [(stage, engine, seconds)], bytes) of one group. A matmul group's stages are
    its prologue (the norm's statistics and scaling: Vector/Scalar), the Tensor-engine matmul and its
    epilogue; other groups have one stage per engine they use."""
    program = plan.program
    group = plan.groups[gi]
    nbytes, mm, _ = group_traffic(plan, gi, None, float("inf"))
    transfers = max(1, len(plan.inputs_of(gi)) + len(plan.outputs_of(gi)))
    # each way (load, store): half the transfers and half the bytes, over all the DMA engines
    dma = model_seconds(declaration("load").latency[DMA], DMA, hw, nbytes=nbytes / 2, transfers=transfers / 2,
                        engines=hw.value("compute.dma.engines"))
    if not mm:
        work = _vector_seconds(plan, group.nodes, hw)
        return dma, [("compute", e, v) for e, v in sorted(work.items())] or [("compute", "vector", 0.0)], nbytes
    tile = TEMPLATES.tile_of(plan, gi, t, hw)
    trn = tile if isinstance(tile, TrnMatmulTile) else TrnMatmulTile()  # no tiling: the template's defaults
    tile_n, tile_m, tile_k = trn.TILE_N, trn.TILE_M, trn.TILE_K
    anchor = group.anchor(program)
    a, b = (program.concrete_shape(j) for j in program.nodes[anchor].inputs)
    batch = math.prod(program.concrete_shape(anchor)[:-2])
    instrs = batch * math.ceil(a[-2] / tile_m) * math.ceil(b[-1] / tile_n) * math.ceil(a[-1] / tile_k)
    # one nc_matmul per (row, column, contraction) tile, TILE_N moving columns each; priced without the
    # declared model's fp32 factor (the trace's latency applies it), as the timeline always has
    per_tile = model_cycles(declaration("nc_matmul").latency[TENSOR], hw, columns=tile_n, fp32=False)
    tensor = engine_seconds(hw, TENSOR, instrs * per_tile)
    before = [n for n in group.nodes if n < anchor]
    after = [n for n in group.nodes if n > anchor]
    stages = [("prologue", e, v) for e, v in sorted(_vector_seconds(plan, before, hw).items())]
    stages.append(("matmul", "tensor", tensor))
    stages += [("epilogue", e, v) for e, v in sorted(_vector_seconds(plan, after, hw).items())]
    return dma, stages, nbytes


def trainium_group_work(plan: FusionPlan, gi: int, t: Tiling | None, hw: HardwareSpec) -> tuple[float, str, float, float]:
    """(DMA seconds each way, busiest engine, its seconds, bytes) of one group on its own: its engines run
    in a software pipeline, so the busiest one bounds it."""
    dma, stages, nbytes = trainium_engine_work(plan, gi, t, hw)
    busy: dict[str, float] = {}
    for _, engine, seconds in stages:
        busy[engine] = busy.get(engine, 0.0) + seconds
    engine = max(busy, key=lambda e: busy[e])
    return dma, engine, busy[engine], nbytes


PIPELINE_CHUNKS = 8  # tiles a fused group's stages are pipelined over in the timeline


def trainium_cost(plan: FusionPlan, tilings: Sequence[Tiling | None], hw: HardwareSpec) -> CostReport:
    """Engine timeline: loads and stores on separate DMA queues (a chip has 16 DMA engines, one group's
    store does not hold up the next independent group's load); a group whose work spans engines (a
    norm fused into a matmul: statistics on Vector/Scalar, the matmul on the Tensor engine) runs as a
    software pipeline over ``PIPELINE_CHUNKS`` tiles, so tile i+1's prologue overlaps tile i's matmul."""
    program = plan.program
    free = {e: 0.0 for e in ("dma_in", "dma_out", "tensor", "vector", "scalar", "gpsimd")}
    done: dict[int, float] = {}
    owner = plan.group_of()
    timeline: list[Interval] = []
    groups: list[GroupCost] = []

    def run(engine: str, ready: float, seconds: float, label: str) -> float:
        start = max(free[engine], ready)
        free[engine] = start + seconds
        timeline.append(Interval(engine, start, start + seconds, label))
        return start + seconds

    for gi, group in enumerate(plan.groups):
        t = tilings[gi] if gi < len(tilings) else None
        deps = {owner[j] for n in group.nodes for j in program.nodes[n].inputs if j in owner} - {gi}
        ready = max((done[d] for d in deps), default=0.0)
        dma, stages, nbytes = trainium_engine_work(plan, gi, t, hw)
        chunks = PIPELINE_CHUNKS if len(stages) > 1 else 1
        finished = ready
        for c in range(chunks):
            step = run("dma_in", ready, dma / chunks, f"g{gi} load{'' if chunks == 1 else f' {c}'}")
            for stage, engine, seconds in stages:
                label = f"g{gi} {group.kind}" if chunks == 1 else f"g{gi} {stage} {c}"
                step = run(engine, step, seconds / chunks, label)
            finished = run("dma_out", step, dma / chunks, f"g{gi} store{'' if chunks == 1 else f' {c}'}")
        done[gi] = finished
        busiest = max(stages, key=lambda s: s[2])[1]
        groups.append(GroupCost(gi, group.kind, nbytes, 0.0, finished - ready, busiest))
    makespan = max((i.end for i in timeline), default=0.0) + hw.value("costs.launch")
    return CostReport(makespan, groups, timeline)
