"""Phase 2 for NKI candidates: :func:`measure_kernels` (what the pipeline calls for target ``nki``).

With the real Neuron toolchain importable (``nki`` for the current dialect, ``neuronxcc.nki`` for the legacy
one, as the hardware file's ``features.nki_dialect`` says), each kernel is compiled and run on the
NeuronCore: ``baremetal`` runs it on the harness's seeded inputs (correctness against the float64
reference, the same tolerance as on GPUs), then ``benchmark(warmup=, iters=)`` times it with neuron-bench and
the row's latency is the median (``benchmark_result.nc_latency.get_latency_percentile(50)``, microseconds).
Rows carry ``device = "measured (<target>)"``.

Without it (here: the packages come only from AWS's own repository), each kernel runs in the NumPy simulator
on the same inputs and its latency is the simulator trace replayed on the Trainium engine model: the
busiest engine's seconds (engines run concurrently). Rows carry ``device = "simulated (<target>)"``.
A failing kernel is a row (structure_error for a broken hardware limit, wrong_result, runtime_error), never
a crash."""

from __future__ import annotations

import datetime as dt
import importlib
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from axon_eg.backends.kernel import Kernel, input_specs
from axon_eg.hw import HardwareSpec
from axon_eg.ir.interpret import interpret
from axon_eg.ir.program import Program

from .isa import NkiLimitError
from .nki_modules import really_installed
from .simulator import simulate


def toolchain() -> str | None:
    """The installed Neuron toolchain (``nki`` or ``neuronxcc`` with its version), or None."""
    from importlib import metadata, util

    for module, dist in (("nki", "nki"), ("neuronxcc", "neuronx-cc")):
        if util.find_spec(module) is not None:
            try:
                return f"{dist} {metadata.version(dist)}"
            except metadata.PackageNotFoundError:
                return dist
    return None


def device_module(hw: HardwareSpec) -> Any | None:
    """The real NKI module of ``hw``'s dialect (``nki`` or ``neuronxcc.nki``) when it is installed, else None
    (the simulator's stand-ins, which live in ``sys.modules`` only while a kernel runs, do not count)."""
    name = "nki" if hw.value("features.nki_dialect") == "current" else "neuronxcc.nki"
    if not really_installed(name.partition(".")[0]):
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def measure_kernels(program: Program, kernels: Sequence[Kernel], hw: HardwareSpec, *, seed: int = 0,
                    trials: int = 3, warmup: int = 5, iters: int = 20) -> list[dict[str, Any]]:
    """One row per kernel: measured on the NeuronCore when the toolchain is installed, else simulated."""
    module = device_module(hw)
    if module is None:
        return simulate_kernels(program, kernels, hw, seed=seed, trials=trials)
    return device_kernels(module, program, kernels, hw, seed=seed, trials=trials, warmup=warmup, iters=iters)


def _kernel_function(kernel: Kernel, directory: Path) -> Any:
    """The kernel's undecorated function, imported from its own file (the toolchain reads its source)."""
    import importlib.util
    import sys

    path = directory / f"{kernel.name}.py"
    path.write_text("\n".join(ln for ln in kernel.source.splitlines() if ln.strip() != "@nki.jit") + "\n")
    spec = importlib.util.spec_from_file_location(f"axon_eg_nki_{kernel.name}_{abs(hash(str(path)))}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return getattr(mod, kernel.entry)


def device_kernels(module: Any, program: Program, kernels: Sequence[Kernel], hw: HardwareSpec, *, seed: int = 0,
                   trials: int = 3, warmup: int = 5, iters: int = 20) -> list[dict[str, Any]]:
    """Compile, check and time each kernel on the NeuronCore through ``module`` (the real ``nki``)."""
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory(prefix="axon_nki_") as tmp:
        for k in kernels:
            t0 = time.monotonic()
            row = _row(k, f"measured ({hw.name})")
            try:
                fn = _kernel_function(k, Path(tmp))
                run = module.baremetal(fn)
                _check(program, lambda xs: run(*xs), row, seed, trials)
                bench = module.benchmark(warmup=warmup, iters=iters)(fn)
                bench(*_arrays(program, seed))
                median = float(bench.benchmark_result.nc_latency.get_latency_percentile(50))
                row.update(status="ok", stage="done", median_us=median, runs=iters)
            except AssertionError as exc:
                row.update(status="wrong_result", stage="correctness", error=str(exc))
            except Exception as exc:  # a kernel the compiler or the device rejects is the candidate's failure
                row.update(status="runtime_error", stage="run", error="".join(traceback.format_exception(exc))[-4000:])
            row["elapsed_s"] = time.monotonic() - t0
            rows.append(row)
    return rows


def _row(k: Kernel, device: str) -> dict[str, Any]:
    return {"id": k.name, "kind": k.kind, "device": device, "trials": 0, "source": f"{k.name}.py", "entry": k.entry,
            "timestamp": dt.datetime.now(dt.UTC).isoformat()}


def _check(program: Program, run: Callable[[list[np.ndarray]], Any], row: dict[str, Any], seed: int,
           trials: int) -> Any:
    """Run on ``trials`` seeded inputs and compare with the float64 reference (AssertionError on a mismatch);
    returns the last run's result."""
    import torch  # lazy: importing the NKI backend does not load torch

    from axon_eg.measure.harness import TOLERANCES, compare  # lazy: the harness loads torch

    result = None
    for s in range(seed, seed + trials):
        xs = _arrays(program, s)
        result = run(xs)
        outs = result[0] if isinstance(result, tuple) and len(result) == 2 and hasattr(result[1], "busy_seconds") \
            else result
        outs = outs if isinstance(outs, tuple | list) else (outs,)
        refs = interpret(program, [x.astype(np.float64) for x in xs])
        refs = refs if isinstance(refs, tuple) else (refs,)
        tol = max(TOLERANCES[program.nodes[o].dtype.name] for o in program.outputs)
        for j, (g, r) in enumerate(zip(outs, refs)):
            found = compare(torch.from_numpy(np.asarray(g, dtype=np.float32)), r, tol)
            if found is not None:
                row["max_abs_err"] = max(row.get("max_abs_err") or 0.0, found[5])
            if found is not None and found[0] != "ok":
                raise AssertionError(f"output {j}: {found[1]} elements {found[0]} (first at {found[2]}: got "
                                     f"{found[3]!r}, expected {found[4]!r}; trial seed {s})")
        row["trials"] = s - seed + 1
    return result


def _arrays(program: Program, seed: int) -> list[np.ndarray]:
    import ml_dtypes
    import torch

    from axon_eg.measure.harness import make_inputs  # lazy: the harness loads torch

    kinds = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "fp32": np.float32}
    specs = input_specs(program)
    return [t.to(torch.float32).numpy().astype(kinds[s["dtype"]]) for t, s in zip(make_inputs(specs, seed), specs)]


def simulate_kernels(program: Program, kernels: Sequence[Kernel], hw: HardwareSpec, *, seed: int = 0,
                     trials: int = 3) -> list[dict[str, Any]]:
    """One row per kernel, checked in the NumPy simulator and timed by the engine model (module docstring)."""
    rows = []
    for k in kernels:
        t0 = time.monotonic()
        row = _row(k, f"simulated ({hw.name})")
        try:
            _, trace = _check(program, lambda xs: simulate(k.source, *xs, target=hw.name, trace=True,
                                                           kernel_name=k.entry), row, seed, trials)
            busy = trace.busy_seconds()
            row.update(status="ok", stage="done", median_us=max(busy.values(), default=0.0) * 1e6, runs=1)
        except NkiLimitError as exc:
            row.update(status="structure_error", stage="structure", error=str(exc))
        except AssertionError as exc:
            row.update(status="wrong_result", stage="correctness", error=str(exc))
        except Exception as exc:  # a kernel the simulator cannot run is the candidate's failure, not ours
            row.update(status="runtime_error", stage="run", error="".join(traceback.format_exception(exc))[-4000:])
        row["elapsed_s"] = time.monotonic() - t0
        rows.append(row)
    return rows
