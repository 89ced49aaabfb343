"""Device time (CUDA graph replay) against host enqueue time of the M=16 bucket's generic kernel ("gen") and the
static M=5 kernel ("st5"), called at M=5. Put copies of runs/dyn4/matmul_bias_gelu_b16.py and
matmul_bias_gelu_m5.py (``python benchmarks/dynamic_sizes.py build runs/dyn4``) at runs/exp2/gen.py and
runs/exp2/st5.py, then run this file from the repository root on the GPU."""
import importlib.util, sys, time, torch, triton
def load(p):
    spec = importlib.util.spec_from_file_location(p.split("/")[-1][:-3] + "_m", p); m = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = m; spec.loader.exec_module(m); return m
mods = {n: load(f"runs/exp2/{n}.py") for n in ["gen", "st5"]}
M = 5
x = torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16); w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) / 64
b = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
for n, m in mods.items():
    out = torch.empty(M, 4096, device="cuda", dtype=torch.bfloat16)
    f = lambda: m.kernel(x, w, b, out)
    f(); torch.cuda.synchronize()
    t_host = []
    for _ in range(3):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        for _ in range(200): f()
        t1 = time.perf_counter(); torch.cuda.synchronize(); t_host.append((t1 - t0) / 200 * 1e6)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        f(); f()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(20): f()
    ts = [triton.testing.do_bench(lambda: g.replay(), warmup=20, rep=200, return_mode="median") / 20 * 1e3 for _ in range(2)]
    print(f"{n}: host enqueue {min(t_host):.1f} us/call; graph replay (device only) {ts[0]:.1f} / {ts[1]:.1f} us")
