"""Small GEMM calls timed by the harness as it was (a timed batch enqueued behind only its L2 flushes) and
held (a spinning kernel first, so that the host has enqueued the whole batch before the GPU starts; the
harness's way now), twice each, with the host time of enqueueing one call. The pairs are the static and
generic kernels chosen for matmul_bias_gelu at M = 1 .. 99 in this folder's sweep (``pairs.json``).

    python benchmarks/results/2026-12-06-issue20-buckets-h100/harness/held_batches.py   # GPU; writes $OUT/hexp.json
"""

import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "src"))

import torch  # noqa: E402

from axon_eg.measure import harness  # noqa: E402

HERE = Path(__file__).parent


def as_was(fn, m, inputs, outputs, flush, runs):
    """The batch without the hold (the harness before this change)."""
    cycles, harness.HOLD_CYCLES = harness.HOLD_CYCLES, 0
    try:
        return held(fn, m, inputs, outputs, flush, runs)
    finally:
        harness.HOLD_CYCLES = cycles


held = harness._batch


def load(kernel, into: Path):
    """A kernel of ``pairs.json`` (its file name and source) written out and imported."""
    path = into / kernel["file"]
    path.write_text(kernel["source"])
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod.kernel


def host_us(fn, inputs, outs, n=200):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn(*inputs, *outs)
    t = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return t


def main() -> None:
    out = []
    tmp = tempfile.mkdtemp(prefix="held_batches_")
    for p in json.loads((HERE / "pairs.json").read_text()):
        row = {"M": p["M"]}
        inputs = harness.make_inputs(p["specs"], 0, "cuda")
        for side in ("static", "generic"):
            fn = load(p[side], Path(tmp))
            outs = [torch.empty(s, dtype=harness.TORCH_DTYPES[t], device="cuda")
                    for s, t in zip(p["out_shapes"], p["out_dtypes"])]
            fn(*inputs, *outs)
            kw = dict(device="cuda", mode="dps", out_shapes=[tuple(s) for s in p["out_shapes"]],
                      out_dtypes=p["out_dtypes"])
            for rep in (1, 2):
                for mode, batch in (("asis", as_was), ("held", held)):
                    harness._batch = batch
                    row[f"{side}_{mode}_{rep}"] = harness.time_candidate(fn, p["specs"], **kw)["median_us"]
            harness._batch = held
            row[f"{side}_host_us"] = host_us(fn, inputs, outs)
        out.append(row)
        print(json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
    Path(os.environ.get("OUT", ".")).joinpath("hexp.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
