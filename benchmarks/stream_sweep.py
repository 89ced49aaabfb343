"""Streaming element-wise kernels on the GPU: which block, warps and cache hints reach the copy bandwidth.

    python benchmarks/stream_sweep.py [N] [--out FILE.json]      # GPU box: torch and triton only

One read and one write per element (LeakyReLU 0.2 over N fp32 elements, default 16381 * 12007, an odd count as
in the corpus' a02), in the form the element-wise emitter writes (a full-block branch and a tail branch, each
masked) with every (BLOCK, num_warps) of the template, with and without ``eviction_policy="evict_first"`` on the
load, against torch's own kernel and a device copy of the same bytes. Medians of CUDA-event runs, each after
an L2 flush, after a timed warm-up (``gemm_core_bench.time_us``), as the harness times. Prints a table sorted
by time and the bandwidth of each row.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.gemm_core_bench import time_us as _time  # noqa: E402  (the bare timing loop of the benchmarks)


@triton.jit
def _leaky(p0, out0, N, FULL, BLOCK: tl.constexpr, EVICT: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    if pid < FULL:
        mask = offs < FULL * BLOCK
        if EVICT:
            v0 = tl.load(p0 + offs, mask=mask, other=1.0, eviction_policy="evict_first")
        else:
            v0 = tl.load(p0 + offs, mask=mask, other=1.0)
        tl.store(out0 + offs, tl.where(v0 >= 0.0, v0, 0.2 * v0), mask=mask)
    else:
        mask = offs < N
        v0 = tl.load(p0 + offs, mask=mask, other=1.0)
        tl.store(out0 + offs, tl.where(v0 >= 0.0, v0, 0.2 * v0), mask=mask)


@triton.jit
def _leaky_unmasked(p0, out0, N, FULL, BLOCK: tl.constexpr, EVICT: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    if pid < FULL:
        if EVICT:
            v0 = tl.load(p0 + offs, eviction_policy="evict_first")
        else:
            v0 = tl.load(p0 + offs)
        tl.store(out0 + offs, tl.where(v0 >= 0.0, v0, 0.2 * v0))
    else:
        mask = offs < N
        v0 = tl.load(p0 + offs, mask=mask, other=1.0)
        tl.store(out0 + offs, tl.where(v0 >= 0.0, v0, 0.2 * v0), mask=mask)


def main(argv: list[str]) -> None:
    n = int(argv[0]) if argv and not argv[0].startswith("--") else 16381 * 12007
    out_file = argv[argv.index("--out") + 1] if "--out" in argv else None
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    flush = torch.empty(256 * 2**20 // 4, device="cuda")
    rows = [("torch leaky_relu", _time(lambda: torch.nn.functional.leaky_relu(x, 0.2), flush)),
            ("torch copy_", _time(lambda: y.copy_(x), flush))]
    for label, kernel in (("masked", _leaky), ("unmasked full blocks", _leaky_unmasked)):
        for block, warps in ((1024, 4), (2048, 4), (2048, 8), (4096, 4), (4096, 8), (8192, 8), (8192, 16)):
            for evict in (False, True):
                grid = (triton.cdiv(n, block),)
                full = n // block

                def run(kernel=kernel, block=block, warps=warps, evict=evict, grid=grid, full=full):
                    kernel[grid](x, y, n, full, BLOCK=block, EVICT=evict, num_warps=warps)

                run()
                ref = torch.nn.functional.leaky_relu(x, 0.2)
                assert torch.equal(y, ref), (label, block, warps, evict)
                rows.append((f"{label} BLOCK={block} warps={warps} evict_first={evict}",
                             _time(run, flush)))
    rows.sort(key=lambda r: r[1])
    print(f"{n} fp32 elements, {torch.cuda.get_device_name()}")
    for name, us in rows:
        print(f"{us:9.1f} us  {2 * 4 * n / us / 1e6:6.2f} TB/s  {name}")
    if out_file:
        with open(out_file, "w") as f:
            json.dump({"n": n, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
