"""Device time (CUDA graph replay) against host enqueue time of the M=16 bucket's generic kernel ("gen") and the
static M=5 kernel ("st5"), called at M=5. Put copies of runs/dyn4/matmul_bias_gelu_b16.py and
matmul_bias_gelu_m5.py (``python benchmarks/dynamic_sizes.py build runs/dyn4``) at runs/exp2/gen.py and
runs/exp2/st5.py, then run this file from the repository root on the GPU."""

import importlib.util
import sys
import time

import torch
import triton


def load(path: str):
    spec = importlib.util.spec_from_file_location(path.split("/")[-1][:-3] + "_m", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    mods = {n: load(f"runs/exp2/{n}.py") for n in ["gen", "st5"]}
    m = 5
    x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) / 64
    b = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    for name, mod in mods.items():
        out = torch.empty(m, 4096, device="cuda", dtype=torch.bfloat16)

        def call(mod=mod, out=out) -> None:
            mod.kernel(x, w, b, out)

        call()
        torch.cuda.synchronize()
        host = []
        for _ in range(3):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(200):
                call()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            host.append((t1 - t0) / 200 * 1e6)
        with torch.cuda.stream(torch.cuda.Stream()):
            call()
            call()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(20):
                call()
        times = [triton.testing.do_bench(graph.replay, warmup=20, rep=200, return_mode="median") / 20 * 1e3
                 for _ in range(2)]
        print(f"{name}: host enqueue {min(host):.1f} us/call; graph replay (device only) {times[0]:.1f} / "
              f"{times[1]:.1f} us")


if __name__ == "__main__":
    main()
