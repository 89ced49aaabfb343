"""Phase 1 -> phase 2 hand-off: a bundle directory the measurement worker runs on any machine.

``write_bundle`` puts one source file per Kernel (candidates and baselines), the float64 reference
and ``manifest.json`` (input specs, output dtypes, calling mode, the hardware limits of the
structure stage, per-candidate resources) into a directory. The reference is precomputed by the
NumPy interpreter on the very inputs the harness makes (``ref.npz``) when the program is small (few
outputs and inputs: ``reference_fits_npz``), and otherwise shipped as torch float64 code
(``reference.py``) that the worker runs on its device.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from axon_eg.backends.kernel import Kernel, input_specs, output_dtypes
from axon_eg.backends.torch.lower import emit_module
from axon_eg.hw import HardwareSpec
from axon_eg.ir import ops as O
from axon_eg.ir.interpret import interpret
from axon_eg.ir.program import Program

TRITON_MAX_BLOCK_ELEMS = 1 << 20  # Triton's TRITON_MAX_TENSOR_NUMEL: a block larger than this does not compile
CUDA_MAX_GRID_X = 2**31 - 1
NPZ_MAX_ELEMS = 1 << 19  # above this many reference elements per trial, ship torch float64 code instead (a
# bundle travels to the GPU box: three trials of 2^19 float64 outputs are 12 MB)
NPZ_MAX_INPUT_ELEMS = 1 << 22  # above this many input elements the reference runs on the device too: phase 1
# would otherwise make the full-size inputs and interpret the program in float64 on the CPU (a loss over two
# [16381, 7919] tensors, one scalar out: 53 s of phase 1 and 2 GB per trial)
# and above this many elements of any value it computes (NetVLAD's residuals to its 64 centroids, 157M elements:
# 21 s of phase 1 and 1.3 GB per value)


def limits(hw: HardwareSpec) -> dict[str, int]:
    """The structure stage's limits for one launch on ``hw`` (shared memory and threads come from
    the hardware file; block size and grid from the toolchain)."""
    out = {"block_elems": TRITON_MAX_BLOCK_ELEMS, "grid": CUDA_MAX_GRID_X}
    if hw.get("memory.shared.per_block") is not None:
        out["smem_bytes"] = int(hw.value("memory.shared.per_block"))
    if hw.get("knobs.max_threads_per_block") is not None:
        out["threads"] = int(hw.value("knobs.max_threads_per_block"))
    return out


def reference_arrays(program: Program, seeds: Sequence[int]) -> dict[str, np.ndarray]:
    """Float64 reference outputs on the harness's inputs for each trial seed, keyed ``seed{S}_out{J}``."""
    import torch

    from axon_eg.measure.harness import make_inputs  # lazy: the harness loads torch

    specs = input_specs(program)
    out: dict[str, np.ndarray] = {}
    for s in seeds:
        xs = [t.to(dtype=torch.float64).numpy() for t in make_inputs(specs, s)]
        res = interpret(program, xs)
        for j, r in enumerate(res if isinstance(res, tuple) else (res,)):
            out[f"seed{s}_out{j}"] = np.asarray(r, dtype=np.float64)
    return out


def reference_fits_npz(program: Program) -> bool:
    """Whether phase 1 computes the reference itself (``ref.npz``): the outputs are few enough to ship and
    the inputs and every value the interpreter makes small enough to make and interpret here; otherwise the
    worker runs ``reference.py`` (torch, float64) on its device and phase 1 never holds a tensor of the
    program's size."""
    outputs = sum(math.prod(program.concrete_shape(o)) for o in program.outputs)
    inputs = sum(math.prod(program.concrete_shape(i)) for i in program.input_ids)
    program = program.expand()  # the interpreter's values: composites' too (a softmax's exponentials)
    widest = max((math.prod(program.concrete_shape(i)) for i in range(len(program.nodes))
                  if not O.is_view(program.nodes[i].op)), default=0)
    return outputs <= NPZ_MAX_ELEMS and inputs <= NPZ_MAX_INPUT_ELEMS and widest <= NPZ_MAX_INPUT_ELEMS


def library_tolerance(program: Program) -> str | None:
    """``tf32`` when the program convolves fp32 values through the library (torch's default
    ``torch.backends.cudnn.allow_tf32`` runs them on TF32 tensor cores, every kernel and baseline alike:
    measured on the H200, a Conv1d over 640 terms at 1.2e-4 of the output's rms, tails to 2e-3), else None:
    the harness's tolerance (``harness.TOLERANCES``) the outputs are held to at least."""
    for node in program.nodes:
        d = O.get(node.op)
        if d.kind is O.OpKind.LIBRARY and d.accumulates and node.dtype.name == "fp32":
            return "tf32"
    return None


def has_steps(program: Program) -> bool:
    """Whether the program computes a step function of computed values (registry fact ``steps``: rounding,
    sign, comparisons, argmax, sort indices): its outputs may differ from the float64 reference at isolated
    elements where an fp32 kernel (or torch's own fp32 eager) lands on the other side of a step; the harness
    then lets ``harness.STEP_FRACTION`` of an output's elements be off. A step of the inputs themselves (a
    mask ``x > 0`` of an input) is exact in any precision and does not count."""
    expanded = program.expand()

    def given(j: int) -> bool:  # an input or constant, moved by layout ops: the same value in every precision
        node = expanded.nodes[j]
        op = O.get(node.op)
        return O.is_source(node.op) or (op.kind is O.OpKind.LAYOUT and all(given(k) for k in node.inputs))

    return any(O.get(node.op).meta.get("steps") and not all(given(j) for j in node.inputs)
               for node in expanded.nodes)


def write_bundle(directory: str | os.PathLike[str], program: Program, kernels: Sequence[Kernel], hw: HardwareSpec,
                 *, seed: int = 0, trials: int = 3, timeout_s: float = 60.0, timeouts: Mapping[str, float] | None = None,
                 reference: str = "auto", probes: Sequence[Mapping[str, int]] = ()) -> Path:
    """Write (or refresh) a bundle; returns its directory. ``reference``: auto, npz or torch. ``probes``: other
    bindings of the program's dims (a shape bucket's low end and middle, ``buckets.probe_bindings``) at which
    each shape-generic kernel (``meta["sizes"]``) is also checked and timed (the worker's ``probe_us``)."""
    if trials < 3:  # the worker's harness runs at least harness.MIN_TRIALS = 3 trials, each needs its reference
        raise ValueError(f"trials={trials}: the measurement harness runs at least 3 correctness trials")
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    if reference == "auto":
        reference = "npz" if reference_fits_npz(program) else "torch"
    ref = _reference(root, program, reference == "npz", "ref.npz", "reference.py", seed, trials)
    at = [_probe(root, program, dict(b), reference, seed, trials) for b in probes]
    specs, dts = input_specs(program), output_dtypes(program)
    tolerance = library_tolerance(program)
    steps = has_steps(program)
    entries: list[dict[str, Any]] = []
    for k in kernels:
        atomic_text(root / f"{k.name}.py", k.source)
        entries.append({"id": k.name, "source": f"{k.name}.py", "entry": k.entry, "mode": k.mode, "kind": k.kind,
                        "inputs": specs, "out_dtypes": dts, "reference": ref, "seed": seed, "trials": trials,
                        "timeout_s": (timeouts or {}).get(k.name, timeout_s), "resources": k.resources, "meta": k.meta,
                        "time_wrong": k.kind == "baseline", **({"tolerance": tolerance} if tolerance else {}),
                        **({"steps": True} if steps else {}),
                        **({"probes": at} if at and k.meta.get("sizes") else {})})
    manifest = {"program": program.name, "program_hash": program.hash, "hw": hw.name, "limits": limits(hw),
                "bundle": root.name, "candidates": entries}
    atomic_text(root / "manifest.json", json.dumps(manifest, indent=1, default=str))
    return root


def _probe(root: Path, program: Program, binding: dict[str, int], reference: str, seed: int,
           trials: int) -> dict[str, Any]:
    """A probe entry of the manifest: its label (``M=2``), its inputs and its reference file."""
    label = ",".join(f"{d}={v}" for d, v in sorted(binding.items()))
    name = "probe-" + "-".join(f"{d}{v}" for d, v in sorted(binding.items()))
    program = program.bind(binding)
    npz = reference == "npz" and reference_fits_npz(program)
    return {"label": label, "inputs": input_specs(program),
            "reference": _reference(root, program, npz, f"{name}.npz", f"{name}.py", seed, trials)}


def _reference(root: Path, program: Program, npz: bool, npz_name: str, py_name: str, seed: int, trials: int) -> str:
    """Write ``program``'s reference into the bundle and return how the manifest names it: its float64 outputs
    for the trial seeds (``npz``), else its torch module, run by the worker in float64."""
    if npz:
        tmp = root / npz_name.replace(".npz", ".tmp.npz")
        np.savez(tmp, **reference_arrays(program, range(seed, seed + trials)))
        os.replace(tmp, root / npz_name)
        return npz_name
    atomic_text(root / py_name, emit_module(program))
    return f"{py_name}:reference_torch"


def atomic_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary name and a rename: a reader sees the old file or the new one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
