"""Test helpers for backends: a Candidate for a program as written (no νGraph), and running an emitted
kernel file against the float64 reference through the fixed harness (Triton under TRITON_INTERPRET=1
on a machine without a GPU; set it before triton is first imported)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from axon_eg import bundle
from axon_eg.backends.kernel import Kernel, input_specs, output_dtypes
from axon_eg.backends.triton import interpreter
from axon_eg.egraph.nugraph import Variant
from axon_eg.extract.candidates import Candidate
from axon_eg.extract.fusion import FusionPlan, plans
from axon_eg.extract.tiling import Tiling, space, tilings
from axon_eg.hw import DEFAULT_HW, HardwareSpec, load
from axon_eg.ir.lowp import interpret_lowp
from axon_eg.ir.program import Program
from axon_eg.measure import harness
from axon_eg.targets import backend_for_hw


def candidate_for(program: Program, hw: str | HardwareSpec = DEFAULT_HW, plan_index: int = -1,
                  overrides: Mapping[str, Any] | None = None, isa: tuple[tuple[int, str], ...] = (),
                  plan: FusionPlan | None = None) -> Candidate:
    """A Candidate for ``program`` as written: fusion plan ``plan_index`` of ``plans()`` (-1: the most
    fused) or the given ``plan`` (a backend's derived one), the best feasible tiling per group with
    ``overrides`` applied to every group."""
    spec = load(hw) if not isinstance(hw, HardwareSpec) else hw
    program = program.expand()
    plan = plan if plan is not None else plans(program)[plan_index]
    chosen = []
    for gi in range(len(plan.groups)):
        options, _ = tilings(space(plan, gi, spec, backend_for_hw(spec).templates))
        t = options[0] if options else Tiling(gi, ())
        if overrides:
            t = Tiling(gi, tuple({**dict(t.values), **overrides}.items()))
        chosen.append(t)
    report = backend_for_hw(spec).cost(plan, chosen, spec)
    return Candidate(Variant(program, 0, 0, 0), plan, tuple(chosen), tuple(isa), report.seconds, report)


def load_kernel(kernel: Kernel, directory: str | Path) -> Any:
    """Write the kernel's file and import it; returns its entry point."""
    interpreter.apply()  # under TRITON_INTERPRET=1 only
    path = Path(directory) / f"{kernel.name}.py"
    path.write_text(kernel.source)
    mod = import_file(path, f"axon_eg_test_{kernel.name}_{abs(hash(str(path)))}")
    return getattr(mod, kernel.entry)


def close_to_reference(got: Any, want: Any) -> bool:
    """Whether a kernel's torch result equals its float64 reference within what the result's dtype holds:
    1e-4 for fp32, 2e-2 of the largest magnitude for a 16-bit result (bf16 keeps 8 bits of mantissa)."""
    import torch

    if got.dtype in (torch.bfloat16, torch.float16):
        tol = 2e-2 * max(1.0, float(want.abs().max()))
        return torch.allclose(got.double(), want, rtol=2e-2, atol=tol)
    return torch.allclose(got.double(), want, rtol=1e-4, atol=1e-4)


def import_file(path: str | Path, name: str) -> Any:
    """The Python file at ``path`` imported as module ``name`` (registered in ``sys.modules``, where
    ``triton.jit`` finds a kernel's source)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def run_kernel(kernel: Kernel, program: Program, directory: str | Path, trials: int = 3) -> Any:
    """The harness's correctness Outcome of ``kernel`` on ``program`` (bound), float64 reference."""
    fn = load_kernel(kernel, directory)
    ref = bundle.reference_arrays(program, range(trials))
    by_seed = {s: [ref[f"seed{s}_out{j}"] for j in range(len(program.outputs))] for s in range(trials)}
    return harness.check_correctness(fn, input_specs(program), by_seed, trials=trials, mode=kernel.mode,
                                     out_dtypes=output_dtypes(program))


def fp32_conditioned(program: Program, seeds: range = range(3)) -> bool:
    """Whether an unfused fp32 evaluation (every value rounded to fp32) stays finite and within the fp32
    tolerance of the float64 reference: random programs can overflow or cancel in fp32 itself."""
    import numpy as np

    ref = bundle.reference_arrays(program, seeds)
    for s in seeds:
        xs = [t.double().numpy() for t in harness.make_inputs(input_specs(program), s)]
        low = interpret_lowp(program, xs, "fp32")
        for j, a in enumerate(low if isinstance(low, tuple) else (low,)):
            r = ref[f"seed{s}_out{j}"]
            scale = max(1.0, float(np.sqrt(np.mean(r * r)))) if r.size else 1.0
            if not np.all(np.isfinite(a)) or np.any(np.abs(a - r) > 1e-5 * (scale + np.abs(r))):
                return False
    return True
