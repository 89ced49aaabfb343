"""The schema of the hardware descriptions (``data/hw_costs/*.yaml``): the units a figure may be written
in and, per kind (``gpu``, ``trainium``), every dotted key a file may give, whether it is required and
what it holds. ``axon_eg.hw`` checks the files against it; see its docstring for the file format.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

# ---------------------------------------------------------------------------------------------- units
# unit -> (family, exact factor to the family's base unit)
_F = Fraction
UNITS: dict[str, tuple[str, Fraction]] = {
    "B": ("bytes", _F(1)), "KB": ("bytes", _F(10**3)), "MB": ("bytes", _F(10**6)), "GB": ("bytes", _F(10**9)),
    "KiB": ("bytes", _F(2**10)), "MiB": ("bytes", _F(2**20)), "GiB": ("bytes", _F(2**30)),
    "B/s": ("bandwidth", _F(1)), "GB/s": ("bandwidth", _F(10**9)), "TB/s": ("bandwidth", _F(10**12)),
    "FLOP/s": ("flops", _F(1)), "TFLOP/s": ("flops", _F(10**12)),
    "Hz": ("frequency", _F(1)), "GHz": ("frequency", _F(10**9)),
    "s": ("time", _F(1)), "us": ("time", _F(1, 10**6)), "ns": ("time", _F(1, 10**9)),
    "count": ("count", _F(1)), "ratio": ("ratio", _F(1)),
}
BASE_UNIT = {"bytes": "B", "bandwidth": "B/s", "flops": "FLOP/s", "frequency": "Hz", "time": "s", "count": "count",
             "ratio": "ratio"}
INT_FAMILIES = {"bytes", "count"}  # whole numbers in base units


# --------------------------------------------------------------------------------------------- schema
@dataclass(frozen=True)
class Field:
    """What one dotted leaf key holds.

    ``type``: ``quantity`` (a number with a unit of ``family``), ``bool``, ``str``, ``list[int]``,
    ``list[str]``. ``choices`` restricts a ``str`` (or each element of a ``list[str]``). ``range``: a
    ``list[int]`` that is a tile range ``[lo, hi]``, two powers of two with ``lo <= hi`` (the planner offers
    every power of two between them; ``extract/templates``).
    """

    type: str
    family: str | None = None
    required: bool = True
    choices: tuple[str, ...] = ()
    range: bool = False


def _q(family: str, required: bool = True) -> Field:
    return Field("quantity", family, required)


_RANGE = Field("list[int]", range=True)  # a tile range [lo, hi] of the planner's search space, powers of two


_GPU: dict[str, Field] = {
    "memory.hbm.capacity": _q("bytes"),
    "memory.hbm.bandwidth": _q("bandwidth"),  # datasheet
    "memory.hbm.measured_bandwidth": _q("bandwidth", required=False),  # copy, bytes read + written
    "memory.l2.capacity": _q("bytes"),
    "memory.shared.per_sm": _q("bytes"),
    "memory.shared.per_block": _q("bytes"),
    "memory.registers.per_sm": _q("bytes"),
    "memory.registers.per_thread": _q("count", required=False),  # 32-bit registers one thread may hold
    "memory.library_pool_bandwidth": _q("bandwidth", required=False),  # torch's pooling kernels' rate
    "memory.library_row_alignment": _q("bytes", required=False),  # the vendor GEMM's fast path: rows aligned to this
    "compute.units": _q("count"),  # SMs / Xe cores
    "compute.peak.bf16": _q("flops"),  # dense, tensor cores / XMX
    "compute.peak.fp16": _q("flops"),
    "compute.peak.fp32": _q("flops"),  # non-tensor
    "compute.peak.tf32": _q("flops", required=False),  # dense TF32 tensor cores
    "compute.measured_peak.bf16": _q("flops", required=False),  # the vendor library's 16-bit GEMM
    "compute.measured_peak.fp32": _q("flops", required=False),  # the vendor library's fp32 GEMM (ieee)
    "compute.measured_peak.tf32": _q("flops", required=False),  # the vendor library's fp32 GEMM on TF32
    "compute.measured_peak.bf16_dot": _q("flops", required=False),  # Triton tl.dot, 16-bit, pointer loads
    "compute.measured_peak.bf16_dot_tma": _q("flops", required=False),  # the same with TMA loads, not persistent
    "compute.measured_peak.bf16_dot_prologue": _q("flops", required=False),  # Triton, 16-bit, K loop computes an operand
    "compute.measured_peak.fp32_dot": _q("flops", required=False),  # Triton tl.dot, fp32 ieee (CUDA cores)
    "compute.measured_peak.fp32_dot_tma": _q("flops", required=False),  # the same with TMA loads
    # Triton tl.dot on fp32 operands through the 3xTF32 split (input_precision="tf32x3"), the right operand
    # with K contiguous (pointer loads / TMA loads)
    "compute.measured_peak.fp32_dot_3xtf32": _q("flops", required=False),
    "compute.measured_peak.fp32_dot_tma_3xtf32": _q("flops", required=False),
    "compute.measured_peak.library_attention_bf16": _q("flops", required=False),  # torch's sdpa, 16-bit
    "compute.measured_peak.library_attention_fp32": _q("flops", required=False),  # torch's sdpa, fp32
    "compute.measured_peak.library_conv_fp32": _q("flops", required=False),  # cuDNN conv on fp32 (TF32), NCHW
    "compute.measured_peak.library_conv_grouped_fp32": _q("flops", required=False),  # the same, groups > 1
    "compute.measured_peak.library_conv_nhwc_fp32": _q("flops", required=False),  # on channels-last operands
    "compute.measured_peak.library_conv_nhwc_grouped_fp32": _q("flops", required=False),  # the same, groups > 1
    "compute.measured_peak.library_unaligned": _q("flops", required=False),  # the library on rows off alignment
    "compute.measured_peak.dot_misaligned_one": _q("flops", required=False),  # tl.dot, one operand's rows off it
    "compute.measured_peak.dot_misaligned_two": _q("flops", required=False),  # tl.dot, both operands' rows off it
    "compute.max_warps_per_sm": _q("count", required=False),  # resident warps (Little's law in the cost model)
    "compute.max_blocks_per_sm": _q("count", required=False),
    "knobs.num_warps": Field("list[int]"),
    "knobs.default_num_warps": _q("count"),  # a launch that names no num_warps (one of knobs.num_warps)
    "knobs.num_stages.min": _q("count"),
    "knobs.num_stages.max": _q("count"),
    "knobs.warp_size": Field("list[int]"),
    "knobs.max_threads_per_block": _q("count", required=False),  # GPUs: structure-stage limit of one launch
    "knobs.grf_mode": Field("list[str]", required=False),  # Intel XPU only
    "knobs.large_grf_max_warps": _q("count", required=False),  # Intel: 256/512 GRF refused above this
    "costs.launch": _q("time"),  # device-side gap per kernel launch
    "costs.host_launch": _q("time", required=False),  # host-side time to issue one launch
    "costs.hbm_latency": _q("time", required=False),  # load-to-use latency of an HBM access
    "costs.column_reduction_warps": _q("count", required=False),  # warps along a one-pass column reduction's axis at full speed
    "costs.row_reduction_warps": _q("count", required=False),  # warps of a one-pass dependent row reduction at full speed
    "costs.row_reduction_warps_exponent": _q("ratio", required=False),  # its bandwidth: (that / num_warps) ** this
    "costs.loop_accumulator_registers": _q("count", required=False),  # chunk-loop accumulator registers per thread
    "costs.loop_accumulator_exponent": _q("ratio", required=False),  # its bandwidth: (that / registers) ** this
    "costs.tensor_core_min_rows": _q("count", required=False),  # rows of a tl.dot tile at the full tensor-core rate
    "costs.column_run_bytes": _q("bytes", required=False),  # a column reduction's contiguous run at full speed
    "costs.column_run_read_exponent": _q("ratio", required=False),  # reads' bandwidth: (run / that) ** this
    "costs.column_run_write_exponent": _q("ratio", required=False),  # writes' bandwidth, likewise
    "costs.window_loads_per_thread": _q("count", required=False),  # pooling window loads a thread keeps in flight
    "costs.window_overflow_slowdown": _q("count", required=False),  # the bandwidth divided by this past that
    "features.tma": Field("bool", required=False),  # Hopper tensor memory accelerator (tensor descriptors)
    # the tile templates' search ranges (extract/templates): elements per program, rows, tile edges
    "tiles.elementwise.block": _RANGE,  # BLOCK of element-wise, layout and scan groups
    "tiles.rows.block_n": _RANGE,  # row chunk of a row reduction (capped at the row rounded up)
    "tiles.rows.rows_per_program": _RANGE,
    "tiles.rows.column_rows": Field("list[int]", range=True, required=False),  # rows per program of a column reduction
    "tiles.rows.split": Field("list[int]", range=True, required=False),  # programs per row of a split reduction (few long rows)
    "tiles.matmul.block_m": _RANGE,
    "tiles.matmul.block_n": _RANGE,
    "tiles.matmul.block_k": _RANGE,
    "tiles.matmul.split_k": Field("list[int]", range=True, required=False),  # K slices of a matmul with few tiles
    "tiles.gemv.block_m": _RANGE,  # a GEMV (N < 16 output columns) on CUDA cores: thin row bands
    "tiles.gemv.block_k": _RANGE,
    "tiles.gemv.max_elements": _q("count"),  # BLOCK_M * BLOCK_K of one program
    "tiles.split_k.split_k": _RANGE,  # K rows per program of a split-K GEMV
    "tiles.split_k.block_r": _RANGE,  # its streamed tile width
    "tiles.split_k.max_elements": _q("count"),  # SPLIT_K * BLOCK_R of one program
    "tiles.attention.block_m": _RANGE,  # query rows per program
    "tiles.attention.block_n": _RANGE,  # keys per step
}

_TRAINIUM: dict[str, Field] = {
    "memory.hbm.capacity": _q("bytes"),  # per chip
    "memory.hbm.bandwidth": _q("bandwidth"),  # per chip
    "memory.sbuf.partitions": _q("count"),
    "memory.sbuf.per_partition": _q("bytes"),
    "memory.psum.partitions": _q("count"),
    "memory.psum.per_partition": _q("bytes"),
    "memory.psum.banks": _q("count"),
    "memory.psum.bank": _q("bytes"),
    "compute.cores_per_chip": _q("count", required=False),
    "compute.engines.tensor.clock": _q("frequency"),
    "compute.engines.vector.clock": _q("frequency"),
    "compute.engines.scalar.clock": _q("frequency"),
    "compute.engines.gpsimd.clock": _q("frequency"),
    "compute.engines.tensor.peak.bf16": _q("flops"),  # per NeuronCore
    "compute.engines.tensor.array": _q("count"),
    "compute.dma.engines": _q("count"),
    "compute.dma.bandwidth_per_engine": _q("bandwidth"),
    "limits.partition_max": _q("count"),
    "limits.matmul.contraction_max": _q("count"),
    "limits.matmul.stationary_free_max": _q("count"),
    "limits.matmul.moving_free_max": _q("count"),
    "limits.matmul.accumulation_groups": _q("count"),
    "limits.transpose.tensor_engine_max": _q("count"),
    "limits.transpose.vector_engine_max": _q("count"),
    "limits.vector.free_max_sbuf": _q("count"),
    "limits.vector.free_max_psum": _q("count"),
    "limits.vector.bn_stats_free_max": _q("count"),
    "limits.vector.max8_free_max": _q("count"),
    "features.dma_transpose": Field("bool"),
    "features.neuroncore_v3": Field("bool"),
    "features.nki_dialect": Field("str", choices=("legacy", "current")),
    "costs.dma_fixed": _q("time"),
    "costs.launch": _q("time"),
    "costs.matmul_moving_min_cycles": _q("count"),
    "costs.vector_cycles_per_element": _q("count"),
    "costs.dma_efficient_bytes_per_partition": _q("bytes"),
    # the tile templates' search ranges (extract/templates)
    "tiles.matmul.tile_k": _RANGE,  # contraction tile (partition dim)
    "tiles.matmul.tile_m": _RANGE,  # stationary free tile
    "tiles.matmul.tile_n": _RANGE,  # moving free tile
    "tiles.matmul.blocks": _RANGE,  # BLOCK_M and BLOCK_N: tiles per accumulation block
    "tiles.vector.tile_p": _RANGE,  # partitions of a vector tile
    "tiles.vector.tile_f": _RANGE,  # free elements of a vector tile
}

SCHEMA: dict[str, dict[str, Field]] = {"gpu": _GPU, "trainium": _TRAINIUM}
TOP_LEVEL = {"name", "kind", "vendor", "description"}  # description is optional
LEAF_FIELDS = {"value", "unit", "source"}
ALL_KEYS = frozenset(k for fields in SCHEMA.values() for k in fields)
