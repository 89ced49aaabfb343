"""The declared latency models (``semantics.isa.declarations.Latency``) evaluated on sizes, with the constants of
the hardware file. One evaluation for both readers: the simulator's trace (``backends/nki/latency.py`` reads an
instruction's operands and calls :func:`model_cycles`) and the Trainium engine timeline of the cost model
(``backends/nki/cost.py``: whole tiles of work before any instruction exists), so both price an instruction the same
way (the AWS Neuron documentation's cost facts, sourced in ``data/hw_costs/trn*.yaml``). Here rather than
next to the declarations because ``semantics/isa`` is covered by the hash NKI proofs record (a formula change
is not a change of meaning), and rather than in ``backends`` because
``extract`` does not import the backends.

* ``dma``: ``costs.dma_fixed`` per transfer plus bytes over ``compute.dma.bandwidth_per_engine`` (seconds);
* ``streams`` (Vector / Scalar / GpSimd): ~N cycles per input stream of N free elements (N for one input,
  2N for two) times ``costs.vector_cycles_per_element``;
* ``pe`` (TensorE): one moving column per PE cycle, at least ``costs.matmul_moving_min_cycles``; fp32
  operands ~4x slower.

Compute-engine cycles become seconds at ``compute.engines.<engine>.clock``.
"""

from __future__ import annotations

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


def model_cycles(model: Latency, spec: HardwareSpec, *, nbytes: float = 0.0, transfers: float = 1, engines: float = 1,
                 free: float = 0.0, streams: int | None = None, columns: float = 0.0, fp32: bool = False) -> float:
    """Engine cycles (DMA: seconds) of ``model`` on sizes: a DMA's ``nbytes`` over ``transfers`` transfers and
    ``engines`` DMA engines; ``streams`` input streams (None: the model's declared operands) of ``free``
    elements; ``columns`` moving columns through the PE array (``fp32``: an fp32 operand)."""
    if model.kind == DMA_TRANSFER:
        return dma_seconds(spec, nbytes, transfers, engines)
    if model.kind == STREAMS:
        return stream_cycles(spec, len(model.operands) if streams is None else streams, free)
    if model.kind == PE:
        return pe_cycles(spec, columns, fp32)
    raise ValueError(f"unknown latency model {model.kind!r}")


def model_seconds(model: Latency, engine: str, spec: HardwareSpec, **sizes: float) -> float:
    """Seconds ``model`` keeps ``engine`` busy on ``sizes`` (see :func:`model_cycles`)."""
    c = model_cycles(model, spec, **sizes)
    return c if engine == DMA else engine_seconds(spec, engine, c)
