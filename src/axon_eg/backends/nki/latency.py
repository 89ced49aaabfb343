"""The declared latency models (``semantics.isa.declarations.Latency``) priced on one instruction's operands.

The formulas and their hardware-file constants are :mod:`axon_eg.extract.latency` (re-exported here), which
the Trainium engine timeline of the cost model (``backends/nki/cost.py``) evaluates on whole tiles of work; this
module reads the sizes off the simulator's operands (:func:`axon_eg.backends.nki.isa.latency`), so the trace
and the cost model price an instruction the same way (the AWS Neuron documentation's cost facts, each with
its source in ``data/hw_costs/trn*.yaml``):

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

from axon_eg.extract.latency import dma_seconds, engine_seconds, model_cycles, pe_cycles, stream_cycles
from axon_eg.hw import HardwareSpec
from axon_eg.semantics.isa.declarations import DMA, DMA_TRANSFER, PE, STREAMS, Latency

__all__ = ["cycles", "dma_seconds", "engine_seconds", "pe_cycles", "seconds", "stream_cycles"]


def cycles(model: Latency, ops: Mapping[str, Any], spec: HardwareSpec) -> float:
    """Engine cycles of one instruction (DMA: seconds) with operands ``ops`` (name -> ``Operand``)."""
    if model.kind == DMA_TRANSFER:
        return model_cycles(model, spec, nbytes=max(op.nbytes for op in ops.values()))
    if model.kind == STREAMS:
        n = max(ops[o].free_size for o in (*model.operands, "dst") if o in ops)
        return model_cycles(model, spec, free=n, streams=sum(o in ops for o in model.operands))
    if model.kind == PE:
        op = ops[model.operands[0]]
        fp32 = any(o.dtype.name == "float32" for name, o in ops.items() if name != "dst")
        return model_cycles(model, spec, columns=op.free_size if model.columns == "free" else op.partitions, fp32=fp32)
    raise ValueError(f"unknown latency model {model.kind!r}")


def seconds(model: Latency, engine: str, ops: Mapping[str, Any], spec: HardwareSpec) -> float:
    """Seconds one instruction keeps ``engine`` busy."""
    c = cycles(model, ops, spec)
    return c if engine == DMA else engine_seconds(spec, engine, c)
