"""Phase 2 for NKI candidates without a Trainium: each kernel runs in the NumPy simulator on the
harness's seeded inputs (correctness against the float64 reference, the same tolerance as on GPUs),
and its latency is the simulator trace replayed on the Trainium engine model: the busiest engine's
seconds (engines run concurrently). Rows carry ``device = "simulated (<target>)"``. With the real
toolchain installed (``nki`` / ``neuronxcc``), ``toolchain()`` names it; compiling and timing on a
NeuronCore is not wired up yet, so rows stay ``simulated``."""

from __future__ import annotations

import datetime as dt
import time
import traceback
from collections.abc import Sequence
from typing import Any

import numpy as np

from axon_eg.backends.kernel import Kernel, input_specs
from axon_eg.hw import HardwareSpec
from axon_eg.ir.interpret import interpret
from axon_eg.ir.program import Program

from .isa import NkiLimitError


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


def _arrays(program: Program, seed: int) -> list[np.ndarray]:
    import ml_dtypes
    import torch

    from axon_eg.measure.harness import make_inputs

    kinds = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "fp32": np.float32}
    specs = input_specs(program)
    return [t.to(torch.float32).numpy().astype(kinds[s["dtype"]]) for t, s in zip(make_inputs(specs, seed), specs)]


def simulate_kernels(program: Program, kernels: Sequence[Kernel], hw: HardwareSpec, *, seed: int = 0,
                     trials: int = 3) -> list[dict[str, Any]]:
    """One measurement row per kernel (see the module docstring)."""
    import torch

    from axon_eg.measure.harness import TOLERANCES, compare

    from .simulator import simulate

    rows = []
    device = f"simulated ({hw.name})"
    for k in kernels:
        t0 = time.monotonic()
        row: dict[str, Any] = {"id": k.name, "kind": k.kind, "device": device, "trials": 0, "source": f"{k.name}.py",
                               "entry": k.entry, "timestamp": dt.datetime.now(dt.UTC).isoformat()}
        try:
            for s in range(seed, seed + trials):
                xs = _arrays(program, s)
                outs, trace = simulate(k.source, *xs, target=hw.name, trace=True, kernel_name=k.entry)
                outs = outs if isinstance(outs, tuple | list) else (outs,)
                refs = interpret(program, [x.astype(np.float64) for x in xs])
                refs = refs if isinstance(refs, tuple) else (refs,)
                tol = max(TOLERANCES[program.nodes[o].dtype.name] for o in program.outputs)
                for j, (g, r) in enumerate(zip(outs, refs)):
                    got = torch.from_numpy(np.asarray(g, dtype=np.float32))
                    found = compare(got, r, tol)
                    if found is not None:
                        row["max_abs_err"] = max(row.get("max_abs_err") or 0.0, found[5])
                    if found is not None and found[0] != "ok":
                        raise AssertionError(f"output {j}: {found[1]} elements {found[0]} (first at {found[2]}: got "
                                             f"{found[3]!r}, expected {found[4]!r}; trial seed {s})")
                row["trials"] = s - seed + 1
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
