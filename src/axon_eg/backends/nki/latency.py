"""The declared latency models (``semantics.isa.declarations.Latency``) as numbers from the hardware file.

Two readers: the simulator's trace (:func:`axon_eg.backends.nki.isa.latency`, one instruction with its
operands) and the Trainium engine timeline of the cost model (``extract/cost.py``, whole tiles of work
before any instruction exists), so both price an instruction the same way (hw-facts.md):

* ``dma``: ``costs.dma_fixed`` per transfer plus bytes over ``compute.dma.bandwidth_per_engine`` (seconds);
* ``streams`` (Vector / Scalar / GpSimd): ~N cycles per input stream of N free elements (N for one input,
  2N for two) times ``costs.vector_cycles_per_element``;
* ``pe`` (TensorE): one moving column per PE cycle, at least ``costs.matmul_moving_min_cycles``; fp32
  operands ~4x slower.

Compute-engine cycles become seconds at ``compute.engines.<engine>.clock``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from axon_eg.hw import HardwareSpec
from axon_eg.semantics.isa.declarations import DMA, DMA_TRANSFER, PE, STREAMS, Latency


def dma_seconds(spec: HardwareSpec, nbytes: float, transfers: float = 1, engines: float = 1) -> float:
    """Seconds of ``transfers`` DMAs moving ``nbytes`` in all over ``engines`` DMA engines."""
    return spec.value("costs.dma_fixed") * transfers + nbytes / (engines * spec.value("compute.dma.bandwidth_per_engine"))


def stream_cycles(spec: HardwareSpec, streams: int, free: float) -> float:
    """Vector / Scalar / GpSimd cycles of ``streams`` input streams (at least one) of ``free`` elements."""
    return max(1, streams) * free * spec.value("costs.vector_cycles_per_element")


def pe_cycles(spec: HardwareSpec, columns: float, fp32: bool = False) -> float:
    """TensorE cycles of ``columns`` moving columns."""
    return max(columns, spec.value("costs.matmul_moving_min_cycles")) * (4 if fp32 else 1)


def engine_seconds(spec: HardwareSpec, engine: str, cycles: float) -> float:
    return cycles / spec.value(f"compute.engines.{engine}.clock")


def cycles(model: Latency, ops: Mapping[str, Any], spec: HardwareSpec) -> float:
    """Engine cycles of one instruction (DMA: seconds) with operands ``ops`` (name -> ``Operand``)."""
    if model.kind == DMA_TRANSFER:
        return dma_seconds(spec, max(op.nbytes for op in ops.values()))
    if model.kind == STREAMS:
        n = max(ops[o].free_size for o in (*model.operands, "dst") if o in ops)
        return stream_cycles(spec, sum(o in ops for o in model.operands), n)
    if model.kind == PE:
        op = ops[model.operands[0]]
        fp32 = any(o.dtype.name == "float32" for name, o in ops.items() if name != "dst")
        return pe_cycles(spec, op.free_size if model.columns == "free" else op.partitions, fp32)
    raise ValueError(f"unknown latency model {model.kind!r}")


def seconds(model: Latency, engine: str, ops: Mapping[str, Any], spec: HardwareSpec) -> float:
    """Seconds one instruction keeps ``engine`` busy."""
    c = cycles(model, ops, spec)
    return c if engine == DMA else engine_seconds(spec, engine, c)
