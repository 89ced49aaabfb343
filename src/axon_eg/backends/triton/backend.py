"""The Triton backend (GPUs): :data:`TRITON`, the :class:`~axon_eg.backends.base.Backend` the pipeline
and the enumerator use for target ``triton``.

Candidates are emitted by :mod:`.emit`; torch eager (and, on a GPU, ``torch.compile``) are the baselines;
the bundle goes through :func:`axon_eg.bundle.write_bundle` to the measurement worker (child process per
candidate). Costs are the GPU roofline of :mod:`.cost`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from axon_eg.backends.base import Fallback
from axon_eg.backends.kernel import Kernel, NotLowerable
from axon_eg.backends.torch.lower import emit_module
from axon_eg.bundle import write_bundle
from axon_eg.extract.fusion import ATTENTION, LIBRARY, MATMUL, FusionPlan, into_windows, merge_elementwise, window_producers
from axon_eg.extract.templates import is_gemv
from axon_eg.hw import HardwareSpec
from axon_eg.ir import ops as O
from axon_eg.ir.dtypes import DTYPES
from axon_eg.ir.program import Program

from . import blas, conv_nhwc, emit, interpreter, sdpa
from .cost import gpu_cost, group_seconds, library_misaligned
from .isa import (
    BLAS,
    BLAS_PADK,
    DOT,
    DOT_PERSISTENT,
    DOT_TMA,
    FMA_REDUCE,
    LIBRARY_CALL,
    NHWC,
    SDPA,
    TF32,
    TF32X3,
    WINDOW,
    base,
    is_blas,
)
from .templates import TEMPLATES

TORCH_COMPILE_TIMEOUT_S = 600.0
BUNDLE_TIMEOUT_S = 120.0


class TritonBackend:
    name = "triton"
    hw_kind = "gpu"
    needs = "a GPU description"
    kernel_mode = "dps"
    kernel_modes = ("dps", "return")  # candidates write their outputs; torch baselines return them
    torch_baselines = True
    templates = TEMPLATES

    def accepts(self, hw: HardwareSpec) -> bool:
        return hw.kind == self.hw_kind

    def argument_types(self) -> tuple[type, dict[str, Any], bool]:
        import torch  # lazy: only a caller with tensors pays for torch

        return torch.Tensor, {name: getattr(torch, d.torch_name) for name, d in DTYPES.items()}, True

    def call(self, best: Any, inputs: tuple[Any, ...]) -> Any:
        """Torch tensors in; a candidate (destination passing) gets output tensors allocated on the inputs'
        device, a baseline returns its outputs."""
        import torch  # lazy: only a caller with tensors pays for torch

        fn = _load(best)
        if best.mode == "return":
            return fn(*inputs)
        program = best.program
        device = inputs[0].device if inputs else torch.device("cpu")
        outs = [torch.empty(program.concrete_shape(o), dtype=getattr(torch, program.nodes[o].dtype.torch_name),
                            device=device) for o in program.outputs]
        fn(*inputs, *outs)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def program_dtypes(self) -> tuple[tuple[str, ...], str]:
        from axon_eg.measure.harness import TORCH_DTYPES  # lazy: the harness loads torch

        return tuple(TORCH_DTYPES), "the measurement harness"

    def device(self, spec: HardwareSpec, requested: str | None) -> str:
        if requested is not None:
            return requested
        import torch  # lazy: only asked when no device was named

        return "cuda" if torch.cuda.is_available() else "cpu"

    # -- enumeration -----------------------------------------------------------------------------------
    def isa_options(self, plan: FusionPlan, gi: int, hw: HardwareSpec, precision: str = "ieee") -> list[str] | None:
        """A matmul with a single output column (a GEMV after the νGraph's rewrite) may skip ``tl.dot``;
        on Hopper, attention and matmul operand tiles may go through tensor descriptors (TMA), and the
        matmul may be persistent (one program per SM looping over output tiles); a matmul
        group the vendor library can run whole (``blas.core``) may be that library call (and, where its K rows
        are off the library's alignment, the call on K-padded copies: ``blas+padk``), an attention
        group torch's ``scaled_dot_product_attention`` (``sdpa.core``), a pooling library group torch's pooling
        or our window kernel (``emit.window_pool``; only ours where the group holds the element-wise values the pooling
        reads, ``fusion.window_producers``), a 2-d / 3-d fp32 conv the library on NCHW or on
        channels-last operands (``conv_nhwc.core``, where the hardware file has that rate). Under the
        ``tf32`` policy the choices of groups with fp32 operands carry ``/tf32`` (TF32 tensor cores); under
        ``ieee`` a matmul's ``tl.dot`` choices come also with ``/3xtf32`` (the 3xTF32 split, fp32's accuracy
        on tensor cores; ``strict`` leaves it out)."""
        g = plan.groups[gi]
        if g.kind == LIBRARY:  # a pooling: torch's, or each output's window computed by our kernel
            if emit.window_pool(plan, gi) is not None:  # with producers moved in, only our kernel computes them
                return [WINDOW] if window_producers(plan, gi) else [LIBRARY_CALL, WINDOW]
            if hw.get("compute.measured_peak.library_conv_nhwc_fp32") and conv_nhwc.core(plan, gi) is not None:
                return [LIBRARY_CALL, NHWC]  # a conv: the library on NCHW, or on channels-last copies
            return None
        if g.kind == ATTENTION:  # Hopper: q/k/v tiles through tensor descriptors; the library's attention
            opts = [DOT, DOT_TMA] if hw.get("features.tma") else []
            # (no /3xtf32: the flash kernel with tf32x3 dots measured 46.8 ms on t01_MultiHeadAttention, fp32,
            # where torch's attention takes 2.0 ms; issue 18, 2026-12-03)
            return opts + [SDPA] if sdpa.core(plan, gi) is not None else (opts or None)
        if g.kind != MATMUL:
            return None
        # a GEMV's thin tilings (BLOCK_M < 16) only suit fma_reduce: tl.dot needs 16 x 16 tiles
        # Hopper: operand tiles through tensor descriptors (TMA) as an alternative to pointer loads
        tma = [DOT_TMA, DOT_PERSISTENT] if hw.get("features.tma") else []
        opts = [FMA_REDUCE] if is_gemv(plan, gi) else [DOT, *tma]
        if blas.core(plan, gi) is not None:
            opts.append(BLAS)
            if library_misaligned(plan, gi, hw)[0]:  # K rows off the library's alignment: pad them
                opts.append(BLAS_PADK)
        if precision == "tf32" and _fp32_matmul(plan, gi):
            opts = [o if o == FMA_REDUCE else o + TF32 for o in opts]
        elif precision == "ieee" and hw.get("compute.peak.tf32") and _fp32_matmul(plan, gi):  # TF32 tensor cores
            opts += [o + TF32X3 for o in opts if o in (DOT, DOT_TMA, DOT_PERSISTENT)]
        return opts

    def library_call(self, choice: str | None) -> bool:
        """``blas`` and ``blas+padk`` (either precision): cuBLAS through torch."""
        return is_blas(choice)

    def isa_family(self, choice: str | None) -> str | None:
        return base(choice)

    def derived_plans(self, plan: FusionPlan) -> list[FusionPlan]:
        """Every matmul group split into prologue, library core and epilogue (``blas.split``), and that split with
        its element-wise parts merged where they meet (``fusion.merge_elementwise``: two GEMMs' epilogues run
        as one kernel after both); the element-wise values a pooling alone reads moved into its group where
        our window kernel computes it (``fusion.into_windows``, ``emit.window_pool``)."""
        split = blas.split(plan)
        derived = [split, merge_elementwise(split) if split is not None else None,
                   into_windows(plan, lambda p, gi: emit.window_pool(p, gi) is not None)]
        return [d for d in derived if d is not None]

    def cost(self, plan: FusionPlan, tilings: Sequence[Any], hw: HardwareSpec,
             coefficients: dict[str, float] | None = None, isa: tuple[tuple[int, str], ...] = ()) -> Any:
        return gpu_cost(plan, tilings, hw, coefficients, dict(isa))

    def group_cost(self, plan: FusionPlan, gi: int, t: Any, hw: HardwareSpec) -> float:
        return group_seconds(plan, gi, t, hw)

    def lowers(self, plan: FusionPlan, gi: int, tiling: Any, isa: str | None, hw: HardwareSpec) -> bool:
        return emit.lowers(plan, gi, tiling, isa, warp_size=_probe_warp_size(hw))

    def fallback(self, hw: HardwareSpec) -> Fallback | None:
        warp_size = _probe_warp_size(hw)

        def runs_as_torch(plan: FusionPlan, gi: int, tiling: Any, isa: str | None = None) -> bool:
            return emit.runs_as_torch(plan, gi, tiling, isa, warp_size)

        return runs_as_torch

    # -- phase 1 ---------------------------------------------------------------------------------------
    def emit(self, candidate: Any, hw: HardwareSpec, name: str, ranges: dict[str, tuple[int, int]] | None = None) -> Kernel:
        kernel = emit.emit(candidate, hw, name, ranges=ranges)
        if ranges and not kernel.meta["generic"]:
            raise NotLowerable(f"not shape-generic over {_spans(ranges)}: {kernel.meta['generic_why']}")
        return kernel

    def unlowerable(self) -> tuple[type[Exception], ...]:
        return (NotLowerable,)  # only a shape-generic kernel whose guards fail inside its bucket; any other
        # group Triton cannot lower runs as torch code

    def baselines(self, program: Program, device: str) -> list[Kernel]:
        source = emit_module(program)
        kernels = [Kernel("torch_eager", source, "eager", "return", "baseline", {}, {"lowering": "torch"})]
        if device != "cpu":  # compiling for the CPU would only time gcc; on a GPU it is the bar to beat
            kernels.append(Kernel("torch_compile", source, "compiled", "return", "baseline", {},
                                  {"lowering": "torch.compile(max-autotune-no-cudagraphs)"}))
            kernels.append(Kernel("torch_compile_default", source, "compiled_default", "return", "baseline", {},
                                  {"lowering": "torch.compile(default mode)"}))
        return kernels

    def write_bundle(self, bdir: Path, program: Program, kernels: Sequence[Kernel], hw: HardwareSpec,
                     probes: Sequence[Mapping[str, int]] = ()) -> None:
        write_bundle(bdir, program, [k for k in kernels if k.source], hw, timeout_s=BUNDLE_TIMEOUT_S,
                     timeouts={"torch_compile": TORCH_COMPILE_TIMEOUT_S}, probes=probes)

    # -- phase 2 ---------------------------------------------------------------------------------------
    def measures_in_process(self) -> bool:
        return False  # the measurement worker runs the bundle (pipeline's ``_measure``)

    def measure(self, program: Program, kernels: Sequence[Kernel], hw: HardwareSpec) -> list[dict[str, Any]]:
        raise NotImplementedError("Triton kernels are measured by the worker over the bundle")


def _spans(ranges: dict[str, tuple[int, int]]) -> str:
    return ", ".join(f"{d} in [{lo}, {hi}]" for d, (lo, hi) in sorted(ranges.items()))


def _fp32_matmul(plan: FusionPlan, gi: int) -> bool:
    p = plan.program
    return any(p.nodes[n].kind is O.OpKind.CONTRACTION and p.nodes[p.nodes[n].inputs[0]].dtype.name == "fp32"
               for n in plan.groups[gi].nodes)


def _probe_warp_size(hw: HardwareSpec) -> int:
    """The warp size the enumerator's probe lowers with (the widest the hardware file allows)."""
    return int(max(hw.value("knobs.warp_size")))


TRITON = TritonBackend()

__all__ = ["TRITON", "TritonBackend"]


def _load(best: Any) -> Any:
    """The entry point of the selected kernel's file, imported once per ``BestKernel`` (under
    ``TRITON_INTERPRET=1`` when there is no GPU: ``@triton.jit`` must build interpreted functions)."""
    fn = best.__dict__.get("_entry")
    if fn is None:
        import importlib.util
        import os
        import sys

        import torch

        spec = importlib.util.spec_from_file_location(f"axon_eg_best_{best.id}", best.path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # triton.jit reads the function's source through its module
        if not torch.cuda.is_available():  # set it before triton is first imported to be safe
            os.environ.setdefault("TRITON_INTERPRET", "1")
        interpreter.apply()  # under TRITON_INTERPRET=1 only
        spec.loader.exec_module(mod)
        fn = best.__dict__["_entry"] = getattr(mod, best.entry)
    return fn
