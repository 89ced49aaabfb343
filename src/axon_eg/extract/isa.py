"""ISA choice names shared by the cost model, the enumerator and the GPU backend.

A matmul group's kernel is ``tl.dot`` (pointer loads), ``tl.dot+tma`` (Hopper tensor descriptors),
``tl.dot+tma+persistent`` (the same as one program per SM looping over output tiles),
``fma_reduce`` (a GEMV on CUDA cores), ``blas`` (the vendor library through torch) or ``blas+padk`` (the
library on copies of the operands whose reduction dim is zero-padded to the library's row alignment, both
with K contiguous: a K whose rows are not 16-byte aligned takes the library off its tensor-core path); an attention
group's is ``tl.dot`` / ``tl.dot+tma`` (our flash kernel) or ``sdpa`` (torch's
``scaled_dot_product_attention``); a library group holding a pooling op is ``library`` (torch's pooling,
then our kernel for the epilogue) or ``window`` (one kernel of ours computing each output's window,
with the group's prologue and epilogue fused); the suffix
``/tf32`` lets fp32 operands use TF32 tensor cores (the fp32 precision policy ``tf32``; without it fp32
matmuls are ``ieee``, torch's default).
"""

from __future__ import annotations

DOT, DOT_TMA, FMA_REDUCE, BLAS = "tl.dot", "tl.dot+tma", "fma_reduce", "blas"
DOT_PERSISTENT = "tl.dot+tma+persistent"
BLAS_PADK = "blas+padk"
SDPA = "sdpa"
LIBRARY_CALL, WINDOW = "library", "window"
TF32 = "/tf32"
PRECISIONS = ("ieee", "tf32")
"""The fp32 matmul precision policies: ``ieee`` (torch.backends.cuda.matmul.allow_tf32 off, the default)
and ``tf32`` (TF32 tensor cores, only where the user allows it)."""


def base(isa: str | None) -> str | None:
    """The ISA choice without its precision suffix."""
    return isa[: -len(TF32)] if isa is not None and isa.endswith(TF32) else isa


def tf32(isa: str | None) -> bool:
    return isa is not None and isa.endswith(TF32)


def is_blas(isa: str | None) -> bool:
    """A library GEMM choice (``blas`` or ``blas+padk``, either precision)."""
    return base(isa) in (BLAS, BLAS_PADK)
