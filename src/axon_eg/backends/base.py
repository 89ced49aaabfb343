"""The ``Backend`` interface: everything the pipeline and the enumerator ask of a target.

A backend is one code generator with its cost model and its phase 2: Triton for GPUs
(:mod:`axon_eg.backends.triton.backend`), NKI for Trainium (:mod:`axon_eg.backends.nki.backend`).
:mod:`axon_eg.targets` holds the registry (``backend_for``: a target name, ``backend_for_hw``: a hardware
description), above the pipeline that asks it; no module outside ``backends/`` branches on the target or on
the hardware kind, and a layer below the pipeline (``extract/``, ``egraph/``) is handed its backend.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from axon_eg.backends.kernel import Kernel
    from axon_eg.extract.cost import CostReport
    from axon_eg.extract.fusion import FusionPlan
    from axon_eg.extract.templates import Templates, Tiling
    from axon_eg.hw import HardwareSpec
    from axon_eg.ir.program import Program

TARGETS = ("triton", "nki")
"""The target names, in the order error messages list them."""

Fallback = Callable[["FusionPlan", int, "Tiling", "str | None"], bool]
"""``(plan, group, tiling, isa choice) -> True`` when the backend cannot lower the group and would run it
as fp32 torch code (one kernel per op)."""


class Backend(Protocol):
    """One target. The attributes are the facts the pipeline reads; the methods are its phases."""

    name: str  # the target name: "triton", "nki"
    hw_kind: str  # the hardware kind it accepts (``HardwareSpec.kind``): "gpu", "trainium"
    needs: str  # what hardware it needs, for the error on a mismatch: "a GPU description"
    kernel_mode: str  # how its kernels are called (``Kernel.mode``): "dps", "nki"
    torch_baselines: bool  # whether torch eager / torch.compile compete with its candidates
    templates: Templates  # its tile templates (``backends/<target>/templates``), one per kernel kind

    def accepts(self, hw: HardwareSpec) -> bool:
        """Whether ``hw`` describes hardware this backend generates code for."""
        ...

    def program_dtypes(self) -> tuple[tuple[str, ...], str]:
        """(the program dtypes it runs, who says so) for ``validate.program_dtypes``."""
        ...

    def device(self, spec: HardwareSpec, requested: str | None) -> str:
        """The device string phase 2 runs on (part of the cache key)."""
        ...

    # -- enumeration (called by ``extract/`` and ``egraph/`` through ``backend_for_hw``) -------------
    def isa_options(self, plan: FusionPlan, gi: int, hw: HardwareSpec, precision: str = "ieee") -> list[str] | None:
        """The instruction choices of group ``gi`` on ``hw`` (None: the group has no choice to make).
        ``precision`` is the fp32 matmul policy (``ieee``, or ``tf32`` where the user allows it)."""
        ...

    def library_call(self, choice: str | None) -> bool:
        """Whether ISA choice ``choice`` hands the group to a vendor library (its tiling is not ours: the
        enumerator keeps the group's best one and prefers, between equals, the library)."""
        ...

    def isa_family(self, choice: str | None) -> str | None:
        """The choice as what measuring it teaches (Triton: without its fp32 precision suffix)."""
        ...

    def derived_plans(self, plan: FusionPlan) -> list[FusionPlan]:
        """Further fusion plans the target's instruction choices call for (Triton: matmul groups split
        around a library GEMM); the enumerator ranks them with the registry's plans."""
        ...

    def cost(self, plan: FusionPlan, tilings: Sequence[Tiling | None], hw: HardwareSpec,
             coefficients: dict[str, float] | None = None,
             isa: tuple[tuple[int, str], ...] = ()) -> CostReport:
        """The cost model's prediction for a plan at its tilings and instruction choices."""
        ...

    def group_cost(self, plan: FusionPlan, gi: int, t: Tiling, hw: HardwareSpec) -> float:
        """A group's predicted seconds alone (for ranking its tilings); may be infinite."""
        ...

    def lowers(self, plan: FusionPlan, gi: int, tiling: Tiling | None, isa: str | None, hw: HardwareSpec) -> bool:
        """Whether the backend's lowering of group ``gi`` succeeds at ``tiling`` and ``isa`` (exactly when the
        emitter would lower it), decided without generating source wherever the backend can (Triton:
        ``backends.triton.emit.lowers``)."""
        ...

    def fallback(self, hw: HardwareSpec) -> Fallback | None:
        """The enumerator's probe for groups that would run as torch code (None: there are none)."""
        ...

    # -- phase 1 ---------------------------------------------------------------------------------------
    def emit(self, candidate: Any, hw: HardwareSpec, name: str, ranges: dict[str, tuple[int, int]] | None = None) -> Kernel:
        """The candidate's kernel; raises one of :meth:`unlowerable` for a candidate it cannot lower.
        ``ranges`` (dim -> inclusive (low, high)): a shape-generic kernel, right at every size of those
        ranges (a shape bucket), or one of :meth:`unlowerable` saying why it cannot be."""
        ...

    def unlowerable(self) -> tuple[type[Exception], ...]:
        """The exceptions by which :meth:`emit` says a candidate cannot be lowered (recorded by their
        message; any other exception is a bug in a lowering, recorded by its type and last line)."""
        ...

    def baselines(self, program: Program, device: str) -> list[Kernel]:
        """The kernels the candidates must beat (torch eager, torch.compile), first in the bundle."""
        ...

    def write_bundle(self, bdir: Path, program: Program, kernels: Sequence[Kernel], hw: HardwareSpec,
                     probes: Sequence[Mapping[str, int]] = ()) -> None:
        """Write phase 1's kernels (those with a source) where phase 2 reads them, with a manifest. ``probes``:
        the other sizes of a shape bucket at which phase 2 also checks and times each shape-generic kernel
        (a backend that measures at the tuned size only ignores them)."""
        ...

    # -- calling a selected kernel (``result.BestKernel``) -------------------------------------------
    kernel_modes: tuple[str, ...]  # the ``Kernel.mode`` values of its candidates and baselines

    def argument_types(self) -> tuple[type, dict[str, Any], bool]:
        """(the array type its kernels take, the array dtype of each program dtype name, whether a
        contiguous row-major layout is required) for the call-time guard."""
        ...

    def call(self, best: Any, inputs: tuple[Any, ...]) -> Any:
        """Run the selected kernel ``best`` (a ``BestKernel``, arguments already checked) on ``inputs``."""
        ...

    # -- phase 2 ---------------------------------------------------------------------------------------
    def measures_in_process(self) -> bool:
        """True: :meth:`measure` runs the kernels here; False: the measurement worker runs the bundle."""
        ...

    def measure(self, program: Program, kernels: Sequence[Kernel], hw: HardwareSpec) -> list[dict[str, Any]]:
        """One measurements row per kernel (in-process backends only)."""
        ...


__all__ = ["TARGETS", "Backend", "Fallback"]
