"""Smoke-test the fixed measurement harness on a GPU against torch anchors measured on the H200 (PyTorch 2.11,
Triton 3.6, ``triton.testing.do_bench`` medians: eager silu 8192^2 bf16 0.073 ms, eager matmul 4096^3 bf16 0.175 ms).

    python benchmarks/harness_smoke.py        # needs CUDA; imports only numpy, torch, axon_eg.measure

Prints median and IQR (microseconds, L2 flushed before every run) for torch eager silu 8192^2 and
matmul 4096^3 in bf16, with the correctness gate against a float64 NumPy reference on small shapes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from axon_eg.measure.harness import check_correctness, time_candidate  # noqa: E402


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device: the harness only checks correctness here")
        return 0
    silu = lambda x: torch.nn.functional.silu(x)  # noqa: E731
    mm = lambda a, b: a @ b  # noqa: E731
    ok1 = check_correctness(silu, [("x", (64, 96), "bf16")], lambda x: x / (1 + np.exp(-x)), device="cuda")
    ok2 = check_correctness(mm, [("a", (64, 80), "bf16"), ("b", (80, 48), "bf16")], lambda a, b: a @ b, device="cuda")
    print(f"correctness: silu {ok1.status}, matmul {ok2.status}")
    print("| kernel | median us | IQR us | runs |")
    print("|---|---|---|---|")
    for name, fn, specs, out in [
        ("silu 8192x8192 bf16 (eager)", silu, [("x", (8192, 8192), "bf16")], [(8192, 8192)]),
        ("matmul 4096^3 bf16 (eager)", mm, [("a", (4096, 4096), "bf16"), ("b", (4096, 4096), "bf16")], [(4096, 4096)]),
    ]:
        stats = time_candidate(fn, specs, device="cuda", mode="return", out_shapes=out, runs=50)
        print(f"| {name} | {stats['median_us']:.1f} | {stats['iqr_us']:.1f} | {stats['runs']} |")
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
