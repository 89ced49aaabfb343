"""Where a kernel's time goes, launch by launch: any kernels of a bundle (baselines included) under
``torch.profiler``, each GPU kernel it launches with its mean device time per call.

    python benchmarks/profile_kernels.py DIR/cache/bundles/<key> [ID ...] [--calls 5]     # GPU box

With no ``ID`` every kernel of the bundle. What torch.compile does where it beats us (which kernels
Inductor launches, how long each takes) and where our own candidate spends its time, in one table per
kernel, printed on the GPU box; only torch, triton and the bundle's files are needed (the measurement
worker's rules), nothing of ``axon_eg`` beyond its harness.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))


def profile(bundle: Path, cid: str, calls: int, device: str = "cuda") -> list[tuple[str, int, float]]:
    """``(kernel name, launches per call, mean device us per call)`` of kernel ``cid`` of ``bundle``,
    longest first, after three warm-up calls (a compiled baseline compiles in the first). On ``device`` "cpu"
    (a dry run of the script, no GPU) the CPU operators instead."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from axon_eg.measure import harness

    cand = next(c for c in json.loads((bundle / "manifest.json").read_text())["candidates"] if c["id"] == cid)
    spec = importlib.util.spec_from_file_location(cid, bundle / cand["source"])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fn = getattr(mod, cand["entry"])
    inputs = harness.make_inputs(cand["inputs"], 0, device)
    n_in = len(inputs)
    mode = harness.resolve_mode(fn, n_in, len(cand["out_dtypes"]), cand.get("mode", "auto"))
    outputs = [torch.empty(shape, dtype=harness.TORCH_DTYPES[d], device=device)  # dps: shapes from the signature
               for (_, shape, _), d in zip(mod.SIGNATURE[n_in:], cand["out_dtypes"])] if mode == "dps" else []
    for _ in range(3):
        harness._call(fn, mode, inputs, outputs)
    gpu = device != "cpu"
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    sync()
    with torch_profile(activities=[ProfilerActivity.CUDA if gpu else ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            harness._call(fn, mode, inputs, outputs)
        sync()
    table: dict[str, list[float]] = {}
    for e in prof.events():
        if not gpu and e.cpu_parent is None:
            table.setdefault(e.name, []).append(e.cpu_time_total)
        elif gpu and e.device_type == torch.autograd.DeviceType.CUDA:
            table.setdefault(e.name, []).append(e.device_time_total)
    rows = [(name, round(len(ts) / calls), sum(ts) / calls) for name, ts in table.items()]
    return sorted(rows, key=lambda r: -r[2])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bundle")
    p.add_argument("ids", nargs="*")
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--device", default="cuda", help="cpu: a dry run of the script (CPU operators, no GPU)")
    args = p.parse_args(argv)
    bundle = Path(args.bundle)
    ids = args.ids or [c["id"] for c in json.loads((bundle / "manifest.json").read_text())["candidates"]]
    for cid in ids:
        try:
            rows = profile(bundle, cid, args.calls, args.device)
        except Exception as e:  # a kernel that fails here is reported, the others still run
            print(f"{bundle.name} {cid}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            continue
        total = sum(us for _, _, us in rows)
        print(f"\n{bundle.name} {cid}: {total:.1f} us of kernels per call")
        for name, n, us in rows:
            print(f"  {us:9.1f} us  x{n:<3d} {name[:110]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
