"""Which kernels run, and for how long, when axon_eg's library candidate and torch.compile meet on one GEMM.

Run under Nsight Compute on a GPU (torch and triton only; nothing of axon_eg is imported)::

    ncu --profile-from-start off --clock-control none --csv \\
        --metrics gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,\\
dram__throughput.avg.pct_of_peak_sustained_elapsed \\
        python benchmarks/ncu_library_parity.py matmul library

Programs are the suite's (same sizes): ``matmul`` (x @ w, 4096^3 bf16), ``transpose_matmul`` (x.T @ w),
``gqa`` (scaled_dot_product_attention with grouped-query heads, B 4, 32 query / 8 key-value heads, S 2048,
head dim 128). Modes: ``library`` is the call axon_eg's blas / sdpa candidate makes (``torch.mm`` with ``out=``,
``torch.nn.functional.scaled_dot_product_attention``); ``compile`` is torch.compile max-autotune-no-cudagraphs of
the same function, autotuned before the profiled window. Only the calls between cudaProfilerStart and
cudaProfilerStop are profiled: a warmed-up, steady-state window of ``CALLS`` calls.
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

CALLS = 5


def _inputs(program: str) -> tuple:
    g = torch.Generator(device="cuda").manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=g)

    if program in ("matmul", "transpose_matmul"):
        return r(4096, 4096), r(4096, 4096)
    if program == "gqa":
        return r(4, 32, 2048, 128), r(4, 8, 2048, 128), r(4, 8, 2048, 128)
    raise SystemExit(f"ncu_library_parity: unknown program {program!r} (matmul, transpose_matmul, gqa)")


def _functions(program: str, args: tuple):
    if program == "matmul":
        out = torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16)
        return (lambda x, w: torch.mm(x, w, out=out)), (lambda x, w: x @ w)
    if program == "transpose_matmul":
        out = torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16)
        return (lambda x, w: torch.mm(x.t(), w, out=out)), (lambda x, w: x.t() @ w)
    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    return sdpa, sdpa


def main(argv: list[str]) -> None:
    if len(argv) != 2 or argv[1] not in ("library", "compile"):
        raise SystemExit("usage: ncu_library_parity.py {matmul,transpose_matmul,gqa} {library,compile}")
    program, mode = argv
    args = _inputs(program)
    library, reference = _functions(program, args)
    fn = library if mode == "library" else torch.compile(reference, mode="max-autotune-no-cudagraphs")
    for _ in range(20):  # compile, autotune and warm the clocks outside the profiled window
        fn(*args)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for _ in range(CALLS):
        fn(*args)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main(sys.argv[1:])
