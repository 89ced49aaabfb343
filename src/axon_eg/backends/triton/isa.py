"""The GPU target's ISA choice names (``TRITON.isa_options``), read by its cost model, emitter and lowerings.

A matmul group's kernel is ``tl.dot`` (pointer loads), ``tl.dot+tma`` (Hopper tensor descriptors),
``tl.dot+tma+persistent`` (the same as one program per SM looping over output tiles),
``fma_reduce`` (a GEMV on CUDA cores), ``blas`` (the vendor library through torch) or ``blas+padk`` (the
library on copies of the operands whose reduction dim is zero-padded to the library's row alignment, both
with K contiguous: a K whose rows are not 16-byte aligned takes the library off its tensor-core path); an attention
group's is ``tl.dot`` / ``tl.dot+tma`` (our flash kernel) or ``sdpa`` (torch's
``scaled_dot_product_attention``); a library group holding a pooling op is ``library`` (torch's pooling,
then our kernel for the epilogue) or ``window`` (one kernel of ours computing each output's window,
with the group's prologue and epilogue fused); one holding a 2-d / 3-d convolution is ``library`` (the
library on NCHW tensors) or ``library+nhwc`` (the library on channels-last copies made by our tiled
transposes, the epilogue transposing back; ``backends/triton/conv_nhwc.py``). Two suffixes set how a
Triton ``tl.dot`` multiplies fp32 operands: ``/tf32`` on TF32 tensor cores (10-bit mantissas, the policy
``tf32``), ``/3xtf32`` on TF32 tensor cores three times (Triton's ``tf32x3``: each operand split into a TF32 high part and a TF32
low part, ``hi*hi + hi*lo + lo*hi`` accumulated in fp32), which keeps fp32's accuracy: measured on the
H200 at 4096^3 on random normal operands, rms error 2.4e-7 of the output's rms against float64, where
cuBLAS's fp32 GEMM is at 1.1e-6 and TF32 at 2.9e-4; without a suffix, fp32 operands go through
``input_precision="ieee"`` (fp32 FMAs). Which suffixes a run allows follows its precision policy
(``validate.PRECISIONS``).
"""

from __future__ import annotations

DOT, DOT_TMA, FMA_REDUCE, BLAS = "tl.dot", "tl.dot+tma", "fma_reduce", "blas"
DOT_PERSISTENT = "tl.dot+tma+persistent"
BLAS_PADK = "blas+padk"
SDPA = "sdpa"
LIBRARY_CALL, WINDOW = "library", "window"
NHWC = "library+nhwc"
TF32 = "/tf32"
TF32X3 = "/3xtf32"
def base(isa: str | None) -> str | None:
    """The ISA choice without its precision suffix."""
    for suffix in (TF32, TF32X3):
        if isa is not None and isa.endswith(suffix):
            return isa[: -len(suffix)]
    return isa


def tf32(isa: str | None) -> bool:
    return isa is not None and isa.endswith(TF32)


def tf32x3(isa: str | None) -> bool:
    """fp32 operands through the 3xTF32 split (Triton's ``input_precision="tf32x3"``)."""
    return isa is not None and isa.endswith(TF32X3)


def dot_precision(isa: str | None) -> str:
    """Triton's ``input_precision`` for a ``tl.dot`` of fp32 operands at ISA choice ``isa``."""
    return "tf32" if tf32(isa) else "tf32x3" if tf32x3(isa) else "ieee"


def is_blas(isa: str | None) -> bool:
    """A library GEMM choice (``blas`` or ``blas+padk``, either precision)."""
    return base(isa) in (BLAS, BLAS_PADK)
