"""fp32 matrix products on the H200: cuBLAS (ieee and TF32) against Triton ``tl.dot`` at
``input_precision`` "tf32" and "tf32x3" (the 3xTF32 split), pointer loads and TMA loads, the right operand
stored N x K (K contiguous, an ``nn.Linear`` weight) or K x N, over a few tilings.

Prints one line per (shape, precision, loads, right-operand order): the best tiling's median time (CUDA
events, 15 runs after a warm-up, the L2 flushed before each) and its rms error relative to the output's rms
against a float64 product of the same operands; then cuBLAS's. The numbers behind
``data/hw_costs/h200.yaml``'s ``compute.measured_peak.fp32_dot*_3xtf32*`` and ``tf32`` (issue 18).

    python benchmarks/fp32_dot_bench.py            # on a GPU with Triton
"""

from __future__ import annotations

import json
import os
import sys

import torch
import triton
import triton.language as tl


def _scratch(size: int, alignment: int, stream):
    return torch.empty(size, device="cuda", dtype=torch.int8)


triton.set_allocator(_scratch)


@triton.jit
def _mm(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
        GM: tl.constexpr, PREC: tl.constexpr, TMA: tl.constexpr, BT: tl.constexpr):
    pid = tl.program_id(0)
    npm = tl.cdiv(M, BM)
    npn = tl.cdiv(N, BN)
    g = pid // (GM * npn)
    fm = g * GM
    gs = min(npm - fm, GM)
    pm = fm + (pid % (GM * npn)) % gs
    pn = (pid % (GM * npn)) // gs
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], tl.float32)
    if TMA:
        da = tl.make_tensor_descriptor(a, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
        if BT:
            db = tl.make_tensor_descriptor(b, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
        else:
            db = tl.make_tensor_descriptor(b, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
        for k in range(0, K, BK):
            x = da.load([pm * BM, k])
            if BT:
                y = db.load([pn * BN, k]).T
            else:
                y = db.load([k, pn * BN])
            acc = tl.dot(x, y, acc, input_precision=PREC)
    else:
        for k in range(0, K, BK):
            x = tl.load(a + rm[:, None] * sam + (k + rk)[None, :] * sak)
            y = tl.load(b + (k + rk)[:, None] * sbk + rn[None, :] * sbn)
            acc = tl.dot(x, y, acc, input_precision=PREC)
    tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc)


def bench(fn, n: int = 15) -> float:
    fn()
    torch.cuda.synchronize()
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    ts = []
    for _ in range(n):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1e3)
    return sorted(ts)[len(ts) // 2]


TILINGS = [(128, 128, 32, 4, 3), (128, 128, 32, 8, 3), (128, 256, 32, 8, 3), (256, 128, 32, 8, 3), (128, 64, 32, 4, 4),
           (128, 128, 64, 8, 2), (128, 128, 64, 8, 3), (64, 256, 32, 4, 4), (128, 256, 16, 8, 4)]
SHAPES = [(4096, 4096, 4096), (1024, 8192, 8192)]


def main() -> int:
    if not torch.cuda.is_available():
        print("fp32_dot_bench: needs a CUDA GPU", file=sys.stderr)
        return 2
    rows = []
    print("| M x N x K | kernel | precision | loads | right operand | best tiling | us | rms error |")
    print("|---|---|---|---|---|---|---:|---:|")
    for M, N, K in SHAPES:
        torch.manual_seed(0)
        a = torch.randn(M, K, device="cuda")
        b_kn = torch.randn(K, N, device="cuda")
        b_nk = b_kn.t().contiguous()
        ref = a.double() @ b_kn.double()
        scale = float(ref.pow(2).mean().sqrt())

        def err(c: torch.Tensor) -> float:
            return float((c.double() - ref).pow(2).mean().sqrt()) / scale

        shape = f"{M} x {N} x {K}"
        for tf32 in (False, True):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            for order, fn in (("N x K", lambda: a @ b_nk.t()), ("K x N", lambda: a @ b_kn)):
                t, e = bench(fn), err(fn())
                rows.append({"shape": [M, N, K], "kernel": "cublas", "precision": "tf32" if tf32 else "ieee",
                             "order": order, "us": t, "err": e})
                print(f"| {shape} | cuBLAS | {'tf32' if tf32 else 'ieee'} | - | {order} | - | {t:.1f} | {e:.2e} |")
        torch.backends.cuda.matmul.allow_tf32 = False
        for prec in ("tf32", "tf32x3"):
            for tma in (0, 1):
                for bt in (1, 0):
                    b = b_nk if bt else b_kn
                    sb = (1, K) if bt else (N, 1)
                    best = None
                    for bm, bn, bk, w, s in TILINGS:
                        c = torch.empty(M, N, device="cuda")
                        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)

                        def fn():
                            _mm[grid](a, b, c, M, N, K, *a.stride(), *sb, *c.stride(), BM=bm, BN=bn, BK=bk, GM=8,
                                      PREC=prec, TMA=tma, BT=bt, num_warps=w, num_stages=s)
                        try:
                            t = bench(fn)
                        except Exception as exc:  # a tiling over the shared memory: skipped, named
                            print(f"# {shape} {prec} tma={tma} {bm}x{bn}x{bk} w{w} s{s}: {type(exc).__name__}")
                            continue
                        if best is None or t < best[0]:
                            best = (t, err(c), f"{bm}x{bn}x{bk}, {w} warps, {s} stages")
                    if best is None:
                        continue
                    order = "N x K" if bt else "K x N"
                    rows.append({"shape": [M, N, K], "kernel": "triton", "precision": prec, "tma": tma, "order": order,
                                 "us": best[0], "err": best[1], "tiling": best[2]})
                    print(f"| {shape} | Triton tl.dot | {prec} | {'TMA' if tma else 'pointers'} | {order} | {best[2]} "
                          f"| {best[0]:.1f} | {best[1]:.2e} |", flush=True)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "fp32_dot_bench.json"), "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
