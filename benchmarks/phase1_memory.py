"""Phase 1's peak memory on problems whose inputs do not fit the machine: phase 1 works on shapes only.

    python benchmarks/phase1_memory.py [PROBLEM.py ...] [--k 3] [--saturation-s 2] [--limit-gb 3]

Each problem (a KernelBench-format file; with none named, a generated one whose ``get_inputs()`` would
allocate 40 GB: GELU and a row sum over [100000, 100000] fp32) runs in a fresh process: ``load_problem``
(the model's parameters real, ``forward`` traced on fake inputs) and ``write_bundle_only`` (saturate,
extract, emit; the reference shipped as torch code for the device when the inputs are big). The process
reports its own peak resident memory (``ru_maxrss``). Prints one row per problem: input size, phase 1
seconds, peak resident GB, where the reference is computed, and whether the peak is under ``--limit-gb``
(issue 19's target: under 3 GB for a problem with 40 GB of inputs). Exits 1 when a problem fails or is over.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HUGE = '''"""GELU then a row sum over [100000, 100000] fp32: 40 GB of input."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x).sum(dim=1)


rows = cols = 100000
SMALL_SIZES = {"rows": 3, "cols": 5}


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
'''

CHILD = '''
import json, math, resource, sys, time
sys.path.insert(0, {src!r})
t0 = time.monotonic()
import axon_eg as ax
from axon_eg.pipeline import write_bundle_only
problem = ax.load_problem({path!r})
loaded = time.monotonic() - t0
bundle = write_bundle_only(problem.program, "triton", "h200", {k}, cache_dir={cache!r}, saturation_s={sat})
program = problem.program
nbytes = sum(math.prod(program.concrete_shape(i)) * program.nodes[i].dtype.itemsize for i in program.input_ids)
print(json.dumps({{"input_gb": nbytes / 1e9, "load_s": loaded, "phase1_s": time.monotonic() - t0,
                  "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
                  "reference": "ref.npz (here)" if (bundle / "ref.npz").exists() else "reference.py (device)"}}))
'''


def run_one(path: Path, k: int, saturation_s: float, cache: Path) -> dict:
    code = CHILD.format(src=str(ROOT / "src"), path=str(path), k=k, cache=str(cache), sat=saturation_s)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        return {"error": lines[-1] if lines else f"exit status {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.table import Table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*", type=Path)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--saturation-s", type=float, default=2.0)
    parser.add_argument("--limit-gb", type=float, default=3.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="axon_phase1_") as tmp:
        problems = list(args.problems)
        if not problems:
            problems = [Path(tmp) / "b01_Huge40GB.py"]
            problems[0].write_text(HUGE)
        table = Table(title=f"phase 1 peak memory (limit {args.limit_gb:g} GB)")
        for col in ("problem", "inputs GB", "load s", "phase 1 s", "peak GB", "reference", "ok"):
            table.add_column(col, justify="left" if col in ("problem", "reference") else "right")
        bad = 0
        for path in problems:
            row = run_one(path, args.k, args.saturation_s, Path(tmp) / "cache")
            if "error" in row:
                bad += 1
                table.add_row(path.stem, "", "", "", "", row["error"][:80], "FAIL")
                continue
            ok = row["peak_gb"] <= args.limit_gb and math.isfinite(row["peak_gb"])
            bad += not ok
            table.add_row(path.stem, f"{row['input_gb']:.1f}", f"{row['load_s']:.1f}", f"{row['phase1_s']:.1f}",
                          f"{row['peak_gb']:.2f}", row["reference"], "yes" if ok else "OVER")
    Console(highlight=False, width=120).print(table)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
