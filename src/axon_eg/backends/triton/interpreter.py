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


def round_bf16_to_nearest_even() -> None:
    """The interpreter truncates fp32 -> bf16 casts (``.to``, the cast in ``tl.store``) where GPUs round
    to nearest even (Triton 3.9). Idempotent; a no-op unless TRITON_INTERPRET=1."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    import numpy as np
    import torch
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder.cast_impl, "rounds_to_nearest_even", False):
        return
    cast = builder.cast_impl

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            rounded = torch.from_numpy(np.ascontiguousarray(src.data, dtype=np.float32)).to(torch.bfloat16)
            return interpreter.TensorHandle(rounded.view(torch.int16).numpy().view(np.uint16), tl.bfloat16)
        return cast(self, src, dst_type)

    cast_impl.rounds_to_nearest_even = True
    builder.cast_impl = cast_impl
    builder.create_fp_trunc = builder.create_fp_ext = lambda self, src, dst_type: self.cast_impl(src, dst_type)


def autotune_without_a_device() -> None:
    """The interpreter has no device to time an ``@triton.autotune``'s configs on (upstream: the autotuner's
    benchmarker asks ``driver.active`` for one, and under the interpreter there is none, ``RuntimeError: 0
    active drivers``): every config times the same, so the autotuner keeps its first and the kernel runs
    (correctness only, as everything under the interpreter)."""
    from triton.runtime import autotuner

    if getattr(autotuner.Autotuner, "_axon_eg_patched", False):
        return
    autotuner.Autotuner._bench = lambda self, *args, config, **meta: [1.0, 1.0, 1.0]
    autotuner.Autotuner._axon_eg_patched = True


def interpret_functions_made_before() -> None:
    """``@triton.jit`` decides at decoration time: a function decorated before ``TRITON_INTERPRET=1`` was set
    (Triton's own library, ``tl.sum``, ``tl.sigmoid``, ``tl.cdiv``..., when ``triton`` was imported first, as
    loading any PyTorch model that touches Inductor does; or a user's kernel module imported earlier) is a
    compiled ``JITFunction``, and calling it from an interpreted kernel fails with "Cannot call @triton.jit'd
    outside of the scope of a kernel" (launching it looks for a GPU driver). Under TRITON_INTERPRET=1, every
    ``JITFunction`` is called and launched through an ``InterpretedFunction`` of the same Python function,
    as if it had been decorated under the interpreter. Idempotent; a no-op unless TRITON_INTERPRET=1."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    from triton.runtime import interpreter
    from triton.runtime.jit import JITFunction

    if getattr(JITFunction, "_axon_eg_interprets", False):
        return

    def interpreted(self: JITFunction) -> interpreter.InterpretedFunction:
        fn = self.__dict__.get("_axon_eg_interpreted")
        if fn is None:
            fn = self.__dict__["_axon_eg_interpreted"] = interpreter.InterpretedFunction(self.fn)
        fn.pre_run_hooks = self.pre_run_hooks
        return fn

    def call(self, *args, **kwargs):  # a device function called from an interpreted kernel
        return interpreted(self)(*args, **kwargs)

    def run(self, *args, grid, warmup, **kwargs):  # ``kernel[grid](...)``, also from an autotuner
        return interpreted(self).run(*args, grid=grid, warmup=warmup, **kwargs)

    JITFunction.__call__ = call
    JITFunction.run = run
    JITFunction._axon_eg_interprets = True


def apply() -> None:
    """Every work-around above (under TRITON_INTERPRET=1 only)."""
    interpret_functions_made_before()
    widen_bf16_dots()
    round_bf16_to_nearest_even()
    autotune_without_a_device()
