"""The NKI backend (Trainium): :data:`NKI`, the :class:`~axon_eg.backends.base.Backend` the pipeline and
the enumerator use for target ``nki``.

Candidates are emitted by :mod:`.emit` and compete among themselves (no torch on a NeuronCore here);
phase 2 runs in-process (:func:`.measure.measure_kernels`: the NeuronCore with the Neuron toolchain, else
the NumPy simulator), so the bundle is the sources and a manifest for the record. Costs are the Trainium
engine timeline of :mod:`.cost`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from axon_eg.backends.base import Fallback
from axon_eg.backends.kernel import Kernel
from axon_eg.extract.fusion import LAYOUT, FusionPlan
from axon_eg.hw import HardwareSpec
from axon_eg.ir.program import Program

from .cost import trainium_cost, trainium_group_work
from .emit import NotLowerable, emit
from .measure import device_module, measure_kernels
from .simulator import simulate
from .templates import TEMPLATES


class NkiBackend:
    name = "nki"
    hw_kind = "trainium"
    needs = "a Trainium description (trn1, trn2)"
    kernel_mode = "nki"
    kernel_modes = ("nki",)
    torch_baselines = False  # no torch on a NeuronCore here: the candidates compete among themselves
    templates = TEMPLATES

    def accepts(self, hw: HardwareSpec) -> bool:
        return hw.kind == self.hw_kind

    def argument_types(self) -> tuple[type, dict[str, Any], bool]:
        """NumPy arrays, any layout (the simulator copies them)."""
        import ml_dtypes
        import numpy as np

        return np.ndarray, {"bf16": np.dtype(ml_dtypes.bfloat16), "fp16": np.dtype(np.float16),
                            "fp32": np.dtype(np.float32)}, False

    def call(self, best: Any, inputs: tuple[Any, ...]) -> Any:
        """NumPy arrays in and out, through the NKI simulator of the kernel's hardware."""
        return simulate(best.source, *inputs, target=best.target, kernel_name=best.entry)

    def program_dtypes(self) -> tuple[tuple[str, ...], str]:
        return ("bf16", "fp16", "fp32"), "the NKI target (Trainium has no float64)"

    def device(self, spec: HardwareSpec, requested: str | None) -> str:
        """``measured-<hw>`` with the Neuron toolchain installed, else ``simulated-<hw>`` (``requested`` is ignored)."""
        return f"{'measured' if device_module(spec) is not None else 'simulated'}-{spec.name}"

    # -- enumeration -----------------------------------------------------------------------------------
    def isa_options(self, plan: FusionPlan, gi: int, hw: HardwareSpec, precision: str = "ieee") -> list[str] | None:
        """A transpose runs on the Tensor engine (``nc_transpose``) or, where the chip has it, in the DMA
        (``dma_transpose``). ``precision`` does not change a choice: fp32 operands are not lowered to
        ``nc_matmul`` (the NKI matmul lowering refuses them)."""
        if plan.groups[gi].kind == LAYOUT:
            return ["nc_transpose"] + (["dma_transpose"] if hw.value("features.dma_transpose") else [])
        return None

    def library_call(self, choice: str | None) -> bool:
        return False  # no vendor library: every group is an NKI kernel of ours

    def isa_family(self, choice: str | None) -> str | None:
        return choice

    def derived_plans(self, plan: FusionPlan) -> list[FusionPlan]:
        return []  # no library GEMM on Trainium: the registry's plans are the whole space

    def cost(self, plan: FusionPlan, tilings: Sequence[Any], hw: HardwareSpec,
             coefficients: dict[str, float] | None = None, isa: tuple[tuple[int, str], ...] = ()) -> Any:
        return trainium_cost(plan, tilings, hw)

    def group_cost(self, plan: FusionPlan, gi: int, t: Any, hw: HardwareSpec) -> float:
        """The group's own timeline: its DMA in and out, then its compute."""
        dma, _, compute, _ = trainium_group_work(plan, gi, t, hw)
        return 2 * dma + compute

    def lowers(self, plan: FusionPlan, gi: int, tiling: Any, isa: str | None, hw: HardwareSpec) -> bool:
        """Every group is attempted; a group the emitter cannot lower fails its candidate at emit time."""
        return True

    def fallback(self, hw: HardwareSpec) -> Fallback | None:
        return None  # there is no torch fallback on a NeuronCore

    # -- phase 1 ---------------------------------------------------------------------------------------
    def emit(self, candidate: Any, hw: HardwareSpec, name: str, ranges: dict[str, tuple[int, int]] | None = None) -> Kernel:
        kernel = emit(candidate, hw, name, ranges=ranges)
        if ranges and not kernel.meta["generic"]:
            spans = ", ".join(f"{d} in [{lo}, {hi}]" for d, (lo, hi) in sorted(ranges.items()))
            raise NotLowerable(f"not shape-generic over {spans}: {kernel.meta['generic_why']}")
        return kernel

    def unlowerable(self) -> tuple[type[Exception], ...]:
        return (NotLowerable,)

    def baselines(self, program: Program, device: str) -> list[Kernel]:
        return []

    def write_bundle(self, bdir: Path, program: Program, kernels: Sequence[Kernel], hw: HardwareSpec,
                     probes: Sequence[Mapping[str, int]] = ()) -> None:
        """Run in-process by the simulator: the sources and a manifest, for the record (measured at the tuned
        size only: ``probes`` are not used)."""
        bdir.mkdir(parents=True, exist_ok=True)
        for kern in kernels:
            if kern.source:
                (bdir / f"{kern.name}.py").write_text(kern.source)
        entries = [{"id": kern.name, "entry": kern.entry, "mode": "nki", "source": f"{kern.name}.py"} for kern in kernels]
        (bdir / "manifest.json").write_text(json.dumps({"program": program.name, "hw": hw.name, "candidates": entries}))

    # -- phase 2 ---------------------------------------------------------------------------------------
    def measures_in_process(self) -> bool:
        return True

    def measure(self, program: Program, kernels: Sequence[Kernel], hw: HardwareSpec) -> list[dict[str, Any]]:
        """The NeuronCore when the Neuron toolchain is installed, else the NumPy simulator."""
        return measure_kernels(program, kernels, hw)


NKI = NkiBackend()

__all__ = ["NKI", "NkiBackend"]
