"""What each Triton kernel of a bundle compiled to (registers, spills, shared memory) and how long it takes
outside the harness: the facts the cost model's register and occupancy terms are calibrated against.

    python benchmarks/kernel_resources.py BUNDLE [BUNDLE ...] [--out FILE.json]     # GPU box: torch, triton

For every candidate of each bundle (``manifest.json``): the candidate file is imported, called once on seeded
inputs built from its ``SIGNATURE`` (outputs allocated by shape), and each ``@triton.jit`` function of the
module is read back from Triton's cache: ``n_regs`` and ``n_spills`` per thread, ``shared`` bytes, per
compiled specialization. The call is then timed twice: by the fixed harness (``axon_eg.measure.harness``,
as phase 2 times it) and by a bare loop (``gemm_core_bench.time_us``: an L2 flush and CUDA events per run, median);
the two should agree: a gap says the harness, not the kernel, is what is slow. Prints one line per kernel.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))


def _compiled(mod) -> list[dict]:
    """n_regs / n_spills / shared of every compiled specialization of the module's jit functions."""
    import triton

    out = []
    for name, obj in vars(mod).items():
        if not isinstance(obj, triton.runtime.jit.JITFunction):
            continue
        for caches in obj.device_caches.values():
            kernels = caches[0] if isinstance(caches, tuple) else caches
            for k in kernels.values():
                if hasattr(k, "_init_handles"):
                    k._init_handles()
                meta = getattr(k, "metadata", None)
                out.append({"kernel": name, "n_regs": getattr(k, "n_regs", None), "n_spills": getattr(k, "n_spills", None),
                            "shared": getattr(meta, "shared", None), "num_warps": getattr(meta, "num_warps", None)})
    return out


def _bare_us(call) -> float:
    import torch

    from benchmarks.gemm_core_bench import time_us

    return time_us(call, torch.empty(256 * 2**20 // 4, dtype=torch.int32, device="cuda"))


def candidate_facts(bundle: Path, cand: dict) -> dict:
    import torch

    from axon_eg.measure import harness

    spec = importlib.util.spec_from_file_location(f"kr_{cand['id']}", bundle / cand["source"])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fn = getattr(mod, cand.get("entry", "kernel"))
    signature = getattr(mod, "SIGNATURE", None)
    if signature is None:
        return {"id": cand["id"], "error": "no SIGNATURE (not an emitted Triton candidate)"}
    inputs = harness.make_inputs(cand["inputs"], int(cand.get("seed", 0)), "cuda", device_draw=True)
    n_in = len(inputs)
    outputs = [torch.empty(shape, dtype=dtype, device="cuda") for _, shape, dtype in signature[n_in:]]
    fn(*inputs, *outputs)
    torch.cuda.synchronize()
    out_dtypes = [str(o.dtype).removeprefix("torch.") for o in outputs]
    names = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64"}
    stats = harness.time_candidate(fn, cand["inputs"], seed=int(cand.get("seed", 0)), device="cuda", mode="dps",
                                   out_shapes=[tuple(o.shape) for o in outputs],
                                   out_dtypes=[names.get(d, d) for d in out_dtypes])
    return {"id": cand["id"], "predicted_us": cand.get("meta", {}).get("predicted_us"), "harness_us": stats["median_us"],
            "bare_us": _bare_us(lambda: fn(*inputs, *outputs)), "kernels": _compiled(mod)}


def main(argv: list[str]) -> None:
    out_file = argv[argv.index("--out") + 1] if "--out" in argv else None
    bundles = [Path(a) for a in argv if not a.startswith("--") and a != out_file]
    rows = []
    for bundle in bundles:
        manifest = json.loads((bundle / "manifest.json").read_text())
        for cand in manifest["candidates"]:
            if cand.get("kind") != "candidate":
                continue
            try:
                row = {"program": manifest.get("program"), **candidate_facts(bundle, cand)}
            except Exception as exc:  # one broken candidate is a line of the table, not the end of it
                row = {"program": manifest.get("program"), "id": cand["id"], "error": f"{type(exc).__name__}: {exc}"[:300]}
            rows.append(row)
            ks = "; ".join(f"{k['kernel']} regs={k['n_regs']} spills={k['n_spills']} smem={k['shared']} "
                           f"warps={k['num_warps']}" for k in row.get("kernels", []))
            print(f"{row['program']:36s} {row['id']:14s} harness {row.get('harness_us') or 0:9.1f} us  bare "
                  f"{row.get('bare_us') or 0:9.1f} us  predicted {row.get('predicted_us') or 0:9.1f}  {ks}"
                  f"{row.get('error', '')}", flush=True)
    if out_file:
        Path(out_file).write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main(sys.argv[1:])
