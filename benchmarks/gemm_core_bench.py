"""GEMM core benchmark: which hand-written Triton bf16 GEMM design is fastest on Hopper, next to cuBLAS.

Measures C = A @ B (A: M x K, B: K x N, both row-major bf16, fp32 accumulation, bf16 output) for
these kernel designs, each swept over ``CONFIGS`` (tile shape, warps, pipeline stages):

* ``tutorial``: the classic Triton matmul tutorial kernel (one program per output tile, grouped
  tile order, pointer loads).
* ``persistent_tma``: the design of Triton's persistent matmul tutorial: one program per SM
  looping over tiles (``tl.range(..., flatten=True)``), device-side TMA tensor descriptors for
  the loads of A and B and the store of C. ``+subtile`` stores the accumulator as two halves
  along N (EPILOGUE_SUBTILE).
* ``persistent_tma_ws``: the same with ``warp_specialize=True`` on the tile loop. Where the
  installed Triton rejects that for the GPU, its rows say ``unsupported: <error>``.

Each (shape, design, config) is checked against ``torch.matmul(a.float(), b.float())``
(max abs error / max abs reference < 1e-2) and timed with CUDA events: >= 10 warm-up runs and >= 0.3 s of them, then 30
timed runs, each after an L2 flush (writing a 256 MB buffer); the median is reported. cuBLAS
(``torch.matmul`` on the bf16 tensors) is timed the same way before and after each shape's sweep;
``x_cublas`` is the mean of those two times over the kernel's time (above 1: faster than cuBLAS).

GPU box (torch + triton + numpy only; about 1-2 minutes on an H200, compiling mostly on the first shape)::

    python benchmarks/gemm_core_bench.py --out $OUT/gemm_core.jsonl          # full sweep
    python benchmarks/gemm_core_bench.py --quick --out $OUT/gemm_core.jsonl  # 3 configs per design

CPU check of every design at small shapes (fp16) against numpy float64 (Triton's interpreter)::

    TRITON_INTERPRET=1 python benchmarks/gemm_core_bench.py --interpret-check
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
import torch
import triton
import triton.language as tl

SHAPES = [  # (M, N, K)
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (8192, 8192, 1024),
    (1024, 8192, 8192),
    (16384, 4096, 4096),
]
# The GEMMs of the transformer-block corpus (benchmarks/blocks, issue 51): (N, K) of each projection, per block,
# at the block's prefill and decode-like token counts M. Written out here (not imported) so that this script
# runs on a GPU box with torch, triton and numpy only; tests/test_blocks_corpus.py checks it against the blocks.
BLOCK_GEMMS = {  # block: ((M prefill, M decode), [(N, K), ...])
    "llama7b": ((2048, 16), [(4096, 4096), (11008, 4096), (4096, 11008)]),  # q/k/v/o; gate/up; down
    "llama1b": ((2048, 16), [(2048, 2048), (512, 2048), (8192, 2048), (2048, 8192)]),  # q/o; k/v; gate/up; down
    "gpt2": ((2048, 16), [(2304, 768), (768, 768), (3072, 768), (768, 3072)]),  # c_attn; c_proj; fc; proj
    "bert": ((2048, 16), [(768, 768), (3072, 768), (768, 3072)]),  # q/k/v/o; intermediate; output
    "vit_b": ((1970, 197), [(2304, 768), (768, 768), (3072, 768), (768, 3072)]),  # qkv; proj; fc1; fc2
    "mixtral_expert": ((512, 4), [(14336, 4096), (4096, 14336)]),  # w1/w3; w2
}
BLOCK_SHAPES = sorted({(m, n, k) for ms, nks in BLOCK_GEMMS.values() for m in ms for n, k in nks})
TILES = [(128, 256, 64), (256, 128, 64), (128, 128, 64), (128, 128, 128), (128, 256, 128)]  # BLOCK_M, N, K
CONFIGS = [
    {"BM": bm, "BN": bn, "BK": bk, "num_warps": w, "num_stages": s, "GROUP_SIZE_M": 8}
    for bm, bn, bk in TILES
    for w in (4, 8)
    for s in (3, 4)
]
QUICK = [(128, 256, 64, 8, 3), (128, 128, 64, 4, 4), (128, 256, 64, 8, 4)]  # BM, BN, BK, num_warps, num_stages
QUICK_CONFIGS = [c for c in CONFIGS if (c["BM"], c["BN"], c["BK"], c["num_warps"], c["num_stages"]) in QUICK]
SMEM_LIMIT = 227 * 1024  # bytes of shared memory one H100/H200 block may use
WARMUP, REPS = 10, 30
WARMUP_S = 0.3  # seconds of back-to-back warm-up runs (each after the L2 flush)
TOLERANCE = 1e-2  # max abs error / max abs reference, for bf16 outputs
FLUSH_BYTES = 256 * 1024 * 1024


@triton.jit
def _grouped_pid(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M: tl.constexpr):
    """Tile coordinates in grouped order: GROUP_SIZE_M rows of tiles are walked column by column (L2 reuse)."""
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + (tile_id % num_pid_in_group) % group_size_m
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def matmul_tutorial_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
):  # fmt: skip
    pid_m, pid_n = _grouped_pid(tl.program_id(0), GROUP_SIZE_M * tl.cdiv(N, BN), tl.cdiv(M, BM), GROUP_SIZE_M)
    offs_am = (pid_m * BM + tl.arange(0, BM)) % M
    offs_bn = (pid_n * BN + tl.arange(0, BN)) % N
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK * stride_ak
        b_ptrs += BK * stride_bk
    offs_cm = pid_m * BM + tl.arange(0, BM)
    offs_cn = pid_n * BN + tl.arange(0, BN)
    c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


@triton.jit
def matmul_persistent_tma_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
    EPILOGUE_SUBTILE: tl.constexpr, NUM_SMS: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
):  # fmt: skip
    dtype = c_ptr.dtype.element_ty
    start_pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    k_tiles = tl.cdiv(K, BK)
    num_tiles = num_pid_m * num_pid_n
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN // 2 if EPILOGUE_SUBTILE else BN])
    # The epilogue recomputes its tile from its own counter, so that no value is shared between the
    # loop's prologue and epilogue (as Triton's persistent matmul tutorial does).
    tile_id_c = start_pid - NUM_SMS
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=True, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = _grouped_pid(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M)
        offs_am = pid_m * BM
        offs_bn = pid_n * BN
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for ki in range(k_tiles):
            offs_k = ki * BK
            a = a_desc.load([offs_am, offs_k])
            b = b_desc.load([offs_k, offs_bn])
            acc = tl.dot(a, b, acc)
        tile_id_c += NUM_SMS
        pid_m, pid_n = _grouped_pid(tile_id_c, num_pid_in_group, num_pid_m, GROUP_SIZE_M)
        offs_cm = pid_m * BM
        offs_cn = pid_n * BN
        if EPILOGUE_SUBTILE:
            acc0, acc1 = tl.split(tl.permute(tl.reshape(acc, (BM, 2, BN // 2)), (0, 2, 1)))
            c_desc.store([offs_cm, offs_cn], acc0.to(dtype))
            c_desc.store([offs_cm, offs_cn + BN // 2], acc1.to(dtype))
        else:
            c_desc.store([offs_cm, offs_cn], acc.to(dtype))


def launch_tutorial(a, b, c, cfg):
    M, K = a.shape
    N = b.shape[1]
    grid = (triton.cdiv(M, cfg["BM"]) * triton.cdiv(N, cfg["BN"]),)
    return matmul_tutorial_kernel[grid](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BM=cfg["BM"], BN=cfg["BN"], BK=cfg["BK"], GROUP_SIZE_M=cfg["GROUP_SIZE_M"],
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip


def persistent_launcher(subtile: bool, warp_specialize: bool):
    def launch(a, b, c, cfg):
        M, K = a.shape
        N = b.shape[1]
        grid = (min(cfg["NUM_SMS"], triton.cdiv(M, cfg["BM"]) * triton.cdiv(N, cfg["BN"])),)
        return matmul_persistent_tma_kernel[grid](
            a, b, c, M, N, K,
            BM=cfg["BM"], BN=cfg["BN"], BK=cfg["BK"], GROUP_SIZE_M=cfg["GROUP_SIZE_M"],
            EPILOGUE_SUBTILE=subtile, NUM_SMS=cfg["NUM_SMS"], WARP_SPECIALIZE=warp_specialize,
            num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
        )  # fmt: skip

    return launch


DESIGNS = {
    "tutorial": launch_tutorial,
    "persistent_tma": persistent_launcher(subtile=False, warp_specialize=False),
    "persistent_tma+subtile": persistent_launcher(subtile=True, warp_specialize=False),
    "persistent_tma_ws": persistent_launcher(subtile=False, warp_specialize=True),
    "persistent_tma_ws+subtile": persistent_launcher(subtile=True, warp_specialize=True),
}


def config_name(cfg) -> str:
    return f"{cfg['BM']}x{cfg['BN']}x{cfg['BK']} w{cfg['num_warps']} s{cfg['num_stages']} g{cfg['GROUP_SIZE_M']}"


def smem_bytes(cfg) -> int:
    return (cfg["BM"] * cfg["BK"] + cfg["BK"] * cfg["BN"]) * 2 * cfg["num_stages"]


def one_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    error_lines = [ln for ln in lines if "error" in ln.lower()]
    return f"{type(exc).__name__}: {(error_lines or lines or [''])[0][:200]}"


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref).abs().max() / ref.abs().max()).item()


def time_us(fn, flush: torch.Tensor) -> float:
    """Median of REPS CUDA-event timings of fn(), each after an L2 flush, after at least WARMUP untimed runs
    and WARMUP_S seconds of them (a GPU left idle while a config compiled starts at a fraction of its clock;
    the measurement harness does the same)."""
    calls, t0 = 0, time.perf_counter()
    while calls < WARMUP or time.perf_counter() - t0 < WARMUP_S:
        flush.zero_()
        fn()
        calls += 1
        if calls % 8 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(REPS)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(REPS)]
    for start, end in zip(starts, ends):
        flush.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))


def run_config(design, cfg, a, b, c, ref, flush, num_sms) -> dict:
    """One row: compile + correctness check, then timing if the result is right."""
    row = {"design": design, "config": config_name(cfg), **cfg}
    launch = DESIGNS[design]
    if smem_bytes(cfg) > SMEM_LIMIT:
        return {**row, "status": f"pruned: {smem_bytes(cfg) // 1024} KiB smem > {SMEM_LIMIT // 1024} KiB"}
    full_cfg = {**cfg, "NUM_SMS": num_sms}
    c.fill_(float("nan"))
    t0 = time.perf_counter()
    try:
        kernel = launch(a, b, c, full_cfg)
        torch.cuda.synchronize()
    except Exception as exc:  # compile errors, out of resources, unsupported options
        unsupported = "_ws" in design and not isinstance(exc, triton.runtime.errors.OutOfResources)
        return {**row, "status": f"{'unsupported' if unsupported else 'failed'}: {one_line(exc)}"}
    row["first_call_s"] = round(time.perf_counter() - t0, 3)
    # Whether the compiler really split the loop into warp-specialized partitions (it may ignore the hint).
    row["warp_specialized_ir"] = "ttg.warp_specialize" in kernel.asm["ttgir"]
    row["rel_err"] = rel_error(c, ref)
    if not row["rel_err"] < TOLERANCE:  # also catches NaN (tiles never written)
        return {**row, "status": f"wrong: rel_err={row['rel_err']:.3g}"}
    row["median_us"] = time_us(lambda: launch(a, b, c, full_cfg), flush)
    return {**row, "status": "ok"}


def print_table(M, N, K, rows, cublas_us):
    print(f"\n=== M={M} N={N} K={K}  cuBLAS {cublas_us[0]:.1f} us before, {cublas_us[1]:.1f} us after ===")
    print(f"{'design':<26} {'config':<24} {'median_us':>10} {'TFLOP/s':>8} {'x_cublas':>8}  status")
    for r in rows:
        us = f"{r['median_us']:.1f}" if "median_us" in r else "-"
        tf = f"{r['tflops']:.1f}" if "tflops" in r else "-"
        x = f"{r['x_cublas']:.3f}" if "x_cublas" in r else "-"
        ws = " (warp-specialized IR)" if r.get("warp_specialized_ir") else ""
        print(f"{r['design']:<26} {r['config']:<24} {us:>10} {tf:>8} {x:>8}  {r['status']}{ws}")


def benchmark(shapes, configs, out_path):
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    props = torch.cuda.get_device_properties(0)
    num_sms = props.multi_processor_count
    flush = torch.empty(FLUSH_BYTES, dtype=torch.int8, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    summary = []
    with open(out_path, "w") as out:

        def emit(row):
            out.write(json.dumps(row) + "\n")
            out.flush()

        meta = {"kind": "meta", "device": props.name, "num_sms": num_sms, "torch": torch.__version__,
                "triton": triton.__version__, "warmup": WARMUP, "warmup_s": WARMUP_S, "reps": REPS,
                "tolerance": TOLERANCE}
        emit(meta)
        print(json.dumps(meta))
        for M, N, K in shapes:
            a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=gen)
            b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16, generator=gen)
            c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
            ref = torch.matmul(a.float(), b.float())
            flop = 2.0 * M * N * K
            shape = {"M": M, "N": N, "K": K}

            def cublas_row(when):
                torch.matmul(a, b, out=c)
                us = time_us(lambda: torch.matmul(a, b, out=c), flush)
                row = {"kind": "cublas", **shape, "design": "cublas", "config": when, "median_us": us,
                       "tflops": flop / us * 1e-6, "rel_err": rel_error(c, ref), "status": "ok"}  # fmt: skip
                emit(row)
                return row

            before = cublas_row("before")
            rows = [run_config(design, cfg, a, b, c, ref, flush, num_sms) for design in DESIGNS for cfg in configs]
            after = cublas_row("after")
            cublas_us = (before["median_us"], after["median_us"])
            for r in rows:
                r.update(kind="triton", **shape)
                if "median_us" in r:
                    r["tflops"] = flop / r["median_us"] * 1e-6
                    r["x_cublas"] = statistics.mean(cublas_us) / r["median_us"]
                emit(r)
            print_table(M, N, K, [before, *rows, after], cublas_us)
            ok = [r for r in rows if r["status"] == "ok"]
            best = min(ok, key=lambda r: r["median_us"]) if ok else None
            summary.append({"kind": "summary", **shape, "cublas_us": cublas_us,
                            **({k: best[k] for k in ("design", "config", "median_us", "tflops", "x_cublas")}
                               if best else {"design": None})})  # fmt: skip
            del a, b, c, ref
            torch.cuda.empty_cache()
        print("\n=== best Triton design per shape (x_cublas > 1: faster than cuBLAS) ===")
        for s in summary:
            emit(s)
            shape = f"{s['M']}x{s['N']}x{s['K']}"
            if s["design"] is None:
                print(f"{shape:<18} no Triton kernel passed")
                continue
            cublas = statistics.mean(s["cublas_us"])
            print(f"{shape:<18} {s['design']:<26} {s['config']:<24} {s['median_us']:9.1f} us "
                  f"{s['tflops']:7.1f} TFLOP/s  cuBLAS {cublas:9.1f} us  x_cublas {s['x_cublas']:.3f}")  # fmt: skip
    print(f"\nrows written to {out_path}")


def interpret_check() -> bool:
    """Every design at small shapes on the CPU (Triton's interpreter) against numpy float64.

    In fp16: the interpreter's tl.dot gives garbage for bf16 operands (seen with Triton 3.9), and the
    kernels take their output dtype from C, so fp16 exercises the same code.
    """
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("--interpret-check needs TRITON_INTERPRET=1 in the environment (set before triton loads)")
    cfg = {"BM": 32, "BN": 32, "BK": 32, "num_warps": 4, "num_stages": 2, "GROUP_SIZE_M": 2, "NUM_SMS": 2}
    rng = np.random.default_rng(0)
    all_ok = True
    for M, N, K in [(64, 64, 64), (80, 48, 96)]:
        a = torch.from_numpy(rng.standard_normal((M, K), dtype=np.float32)).to(torch.float16)
        b = torch.from_numpy(rng.standard_normal((K, N), dtype=np.float32)).to(torch.float16)
        ref = a.float().numpy().astype(np.float64) @ b.float().numpy().astype(np.float64)
        for design, launch in DESIGNS.items():
            c = torch.full((M, N), float("nan"), dtype=torch.float16)
            try:
                launch(a, b, c, cfg)
            except Exception as exc:
                print(f"{M}x{N}x{K} {design:<26} skipped under interpreter: {one_line(exc)}")
                continue
            err = float(np.abs(c.float().numpy().astype(np.float64) - ref).max() / np.abs(ref).max())
            ok = err < TOLERANCE
            all_ok &= ok
            print(f"{M}x{N}x{K} {design:<26} {'pass' if ok else 'FAIL'} rel_err={err:.2e}")
    return all_ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="gemm_core.jsonl", help="JSON lines output (default: gemm_core.jsonl)")
    ap.add_argument("--quick", action="store_true", help="only the 3 QUICK configs per design")
    ap.add_argument("--shapes", help="comma-separated MxNxK list instead of SHAPES, e.g. 4096x4096x4096")
    ap.add_argument("--block-shapes", action="store_true", help="the GEMMs of the block corpus (BLOCK_SHAPES, "
                    "issue 51) instead of SHAPES")
    ap.add_argument("--interpret-check", action="store_true", help="CPU correctness check (TRITON_INTERPRET=1)")
    args = ap.parse_args()
    if args.interpret_check:
        raise SystemExit(0 if interpret_check() else 1)
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")] if args.shapes else \
        BLOCK_SHAPES if args.block_shapes else SHAPES
    benchmark(shapes, QUICK_CONFIGS if args.quick else CONFIGS, args.out)


if __name__ == "__main__":
    main()
