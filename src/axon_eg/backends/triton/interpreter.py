"""Work-arounds for Triton's CPU interpreter (``TRITON_INTERPRET=1``), applied before an emitted kernel
file is imported on a machine without a GPU. Each names its upstream issue; none changes GPU code."""

from __future__ import annotations

import os


def widen_bf16_dots() -> None:
    """The interpreter stores bf16 as uint16 and its ``tl.dot`` multiplies the bit patterns
    (triton-lang/triton#11584, closed unfixed; Triton 3.9): widen bf16 operands to fp32 first (exact,
    and the GPU accumulates bf16 products in fp32 too). Idempotent; a no-op unless TRITON_INTERPRET=1."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder.create_dot, "widens_bf16", False):
        return
    original = builder.create_dot

    def widen(h):
        if h.dtype.scalar != tl.bfloat16:
            return h
        return interpreter.TensorHandle((h.data.astype(np.uint32) << 16).view(np.float32), tl.float32)

    def create_dot(self, a, b, d, *args):
        return original(self, widen(a), widen(b), d, *args)

    create_dot.widens_bf16 = True
    builder.create_dot = create_dot
