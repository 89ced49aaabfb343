"""A Llama-style decoder block through the dynamo backend's flow, against eager and Inductor (issue 21).

    python benchmarks/llama_block.py build DIR     # here: phase 1 per region (bundles under DIR/bundles)
    python benchmarks/llama_block.py measure DIR   # GPU box: the worker over every region's bundle
    python benchmarks/llama_block.py save DIR      # here: select from the rows, write DIR/model_new.py
    python benchmarks/llama_block.py time DIR      # GPU box: check and time eager, Inductor, ModelNew
    python benchmarks/llama_block.py report DIR    # the tables (standard library only)
    python benchmarks/llama_block.py profile DIR   # GPU box: per-kernel device time of Inductor and ModelNew

The block is :class:`axon_eg.testing.modules.DecoderBlock` (RMSNorm, RoPE, grouped-query attention through
SDPA, SwiGLU, residuals), built on the meta device here (phase 1 needs shapes only: no weights, no
activations) and exported at the benchmark's sizes (default 4096 hidden, 32 heads, 8 key/value heads, 11008
intermediate, 2048 tokens, bf16). ``build`` and ``save`` are ``ax.optimize(block, (x,), remote=DIR)`` twice,
before and after the measurements; ``save`` writes the ``ModelNew`` file (the kernels embedded; it imports only
torch and triton), which ``time`` runs on the GPU box.

``time`` builds ``Model`` (the block) and ``ModelNew`` from the same seed in bf16 and, for each of eager,
``torch.compile(block)`` (Inductor, default mode), ``torch.compile(block, mode="max-autotune-no-cudagraphs")``
and ModelNew, alone (compiled, warmed up, checked, timed, freed before the next): the relative error
``|out - ref| / |ref|`` against the block in float64 on the same GPU, on two fresh inputs, and the latency by
the measurement harness (``harness.time_candidate``: L2 flushed, CUDA events, medians of steady batches), in
two passes over the four (each pass in its own order). ``report`` gives the per-region choice (the
rows of each bundle) and the whole-block table.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

SIZES = {"hidden": 4096, "heads": 32, "kv_heads": 8, "intermediate": 11008, "tokens": 2048, "batch": 1}
VARIANTS = ("eager", "inductor", "inductor_max_autotune", "axon_eg")


def _config(args: argparse.Namespace) -> dict:
    return {**{k: getattr(args, k) for k in SIZES}, "dtype": args.dtype, "k": args.k, "region_ops": args.region_ops}


def _optimize(out: Path, cfg: dict):
    import torch

    import axon_eg as ax
    from axon_eg.testing.modules import DecoderBlock

    dtype = getattr(torch, cfg["dtype"])
    with torch.device("meta"):
        block = DecoderBlock(cfg["hidden"], cfg["heads"], cfg["kv_heads"], cfg["intermediate"], cfg["tokens"]).to(dtype)
        x = torch.empty(cfg["batch"], cfg["tokens"], cfg["hidden"], dtype=dtype)
    return ax.optimize(block.eval(), (x,), remote=str(out), k=cfg["k"], region_ops=cfg["region_ops"], hw="h200")


def _regions(model) -> list[dict]:
    return [{"name": r.name, "ops": r.ops, "kernel": r.kernel, "why_torch": r.why_torch, "bundle": r.bundle}
            for r in model.report]


def cmd_build(args: argparse.Namespace) -> int:
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = _config(args)
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    t0 = time.monotonic()
    model = _optimize(out, cfg)
    (out / "build.json").write_text(json.dumps({"phase1_s": time.monotonic() - t0, "regions": _regions(model)},
                                               indent=1))
    for r in model.report:
        print(r.name, len(r.ops), "ops", "->", Path(r.bundle).name if r.bundle else r.why_torch)
    print(f"phase 1: {time.monotonic() - t0:.1f} s; bundles in {out / 'bundles'}")
    return 0


def cmd_measure(args: argparse.Namespace) -> int:
    from axon_eg.measure.cli import main as worker

    bundles = sorted(str(b) for b in (Path(args.dir) / "bundles").iterdir() if (b / "manifest.json").is_file())
    return worker(bundles)


def cmd_save(args: argparse.Namespace) -> int:
    out = Path(args.dir)
    cfg = json.loads((out / "config.json").read_text())
    model = _optimize(out, cfg)
    regions = _regions(model)
    for r in regions:
        rows = [json.loads(line) for line in (Path(r["bundle"]) / "rows.jsonl").read_text().splitlines()] \
            if r["bundle"] and (Path(r["bundle"]) / "rows.jsonl").exists() else []
        r["rows"] = [{k: row.get(k) for k in ("id", "kind", "status", "median_us", "max_abs_err", "error")}
                     for row in rows]
        r["device"] = next((row.get("device") for row in rows if row.get("device")), None)
    (out / "regions.json").write_text(json.dumps(regions, indent=1))
    path = model.save(out / "model_new.py")
    for r in model.report:
        print(r.line())
    print(f"wrote {path}")
    return 0


def _load(path: Path):
    spec = importlib.util.spec_from_file_location("axon_eg_model_new", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _rel(out, ref) -> float:
    return float((out.double() - ref).norm() / ref.norm())


def cmd_time(args: argparse.Namespace) -> int:
    import torch

    from axon_eg.measure.harness import TORCH_DTYPES, time_candidate

    out = Path(args.dir)
    cfg = json.loads((out / "config.json").read_text())
    saved = _load(out / "model_new.py")
    dtype = getattr(torch, cfg["dtype"])
    shape = (cfg["batch"], cfg["tokens"], cfg["hidden"])
    sizes = (cfg["hidden"], cfg["heads"], cfg["kv_heads"], cfg["intermediate"], cfg["tokens"])

    def block(cls):
        torch.manual_seed(0)  # the same weights for every variant
        m = cls(*sizes)
        for p in m.parameters():  # RMSNorm weights start at ones: make them random too
            p.data.normal_(1.0 if p.dim() == 1 else 0.0, 0.1 if p.dim() == 1 else p.shape[-1] ** -0.5)
        return m.to("cuda", dtype).eval()

    torch.manual_seed(1)
    xs = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(2)]
    with torch.no_grad():
        ref_model = block(saved.DecoderBlock).double()
        refs = [ref_model(x.double()) for x in xs]
        del ref_model
    torch.cuda.empty_cache()

    def make(variant: str):
        if variant == "axon_eg":
            return block(saved.ModelNew)
        m = block(saved.DecoderBlock)
        if variant == "inductor":
            return torch.compile(m)
        if variant == "inductor_max_autotune":
            return torch.compile(m, mode="max-autotune-no-cudagraphs")
        return m

    rows: dict[str, dict] = {}
    order = [v for v in VARIANTS if v in (args.variants or VARIANTS)]
    for p, variants in enumerate((order, order[::-1])):
        for variant in variants:
            torch._dynamo.reset()
            gc.collect()
            torch.cuda.empty_cache()
            row = rows.setdefault(variant, {"variant": variant, "median_us": [], "iqr_us": []})
            try:
                model = make(variant)
                with torch.inference_mode():
                    t0 = time.monotonic()
                    outs = [model(x) for x in xs]
                    torch.cuda.synchronize()
                    row.setdefault("first_call_s", time.monotonic() - t0)
                    row["rel_err"] = max(_rel(o, r) for o, r in zip(outs, refs))
                    name = next(k for k, d in TORCH_DTYPES.items() if d == dtype)  # the harness's dtype name
                    t = time_candidate(model, [("x", shape, name)], seed=p + 2)
                row["median_us"].append(t["median_us"])
                row["iqr_us"].append(t["iqr_us"])
            except Exception as exc:  # noqa: BLE001 - a variant that fails is a row, the others still run
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
            finally:
                model = None
            print(variant, f"pass {p + 1}", row.get("median_us"), row.get("rel_err"), row.get("error", ""), flush=True)
            result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                      "triton": __import__("triton").__version__, "config": cfg, "rows": list(rows.values())}
            (out / "timings.json").write_text(json.dumps(result, indent=1))  # after each: a cut-off run keeps rows
    print(report_text(out))
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    """Per-kernel device time of each variant (``torch.profiler``, 10 calls after a warm-up), into
    ``DIR/profile.txt``: where one variant spends more than another."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    out = Path(args.dir)
    cfg = json.loads((out / "config.json").read_text())
    saved = _load(out / "model_new.py")
    dtype = getattr(torch, cfg["dtype"])
    sizes = (cfg["hidden"], cfg["heads"], cfg["kv_heads"], cfg["intermediate"], cfg["tokens"])
    x = torch.randn(cfg["batch"], cfg["tokens"], cfg["hidden"], device="cuda", dtype=dtype)
    text = []
    for variant in args.variants or ("inductor", "axon_eg"):
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = (saved.ModelNew if variant == "axon_eg" else saved.DecoderBlock)(*sizes).to("cuda", dtype).eval()
        if variant.startswith("inductor"):
            model = torch.compile(model, **({"mode": "max-autotune-no-cudagraphs"} if "max" in variant else {}))
        with torch.inference_mode():
            for _ in range(5):
                model(x)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    model(x)
                torch.cuda.synchronize()
        table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=30, max_name_column_width=90)
        text += [f"== {variant} (10 calls)", table]
        del model
    (out / "profile.txt").write_text("\n".join(text))
    print("\n".join(text))
    return 0


def report_text(out: Path) -> str:
    lines: list[str] = []
    cfg = json.loads((out / "config.json").read_text())
    regions_path = out / "regions.json"
    if regions_path.exists():
        lines += ["| region | ops | runs | eager us | chosen us | speedup | candidates ok / measured |",
                  "|---|---:|---|---:|---:|---:|---:|"]
        for r in json.loads(regions_path.read_text()):
            times = {row["id"]: row["median_us"] for row in r["rows"] if row["status"] == "ok"}
            eager = times.get("torch_eager")
            chosen = times.get(r["kernel"]) if r["kernel"] else eager
            cands = [row for row in r["rows"] if row["kind"] == "candidate"]
            speed = f"{eager / chosen:.2f}" if eager and chosen else "-"
            lines.append(f"| {r['name']} | {len(r['ops'])} | {r['kernel'] or 'torch: ' + str(r['why_torch'])[:60]} | "
                         f"{_us(eager)} | {_us(chosen)} | {speed} | "
                         f"{sum(c['status'] == 'ok' for c in cands)} / {len(cands)} |")
        lines.append("")
    for timings in sorted(out.glob("timings*.json")):  # timings.json, and copies from other cards
        t = json.loads(timings.read_text())
        lines.append(f"{t['device']}, torch {t['torch']}, triton {t['triton']}; hidden {cfg['hidden']}, "
                     f"{cfg['tokens']} tokens, {cfg['dtype']}")
        lines += ["", "| variant | pass 1 us | pass 2 us | best us | vs eager | vs Inductor | rel err (float64) |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        best = {r["variant"]: min(r["median_us"]) for r in t["rows"] if r["median_us"]}
        for r in t["rows"]:
            b = best.get(r["variant"])
            passes = [_us(v) for v in r["median_us"]] + ["-"] * (2 - len(r["median_us"]))
            lines.append(f"| {r['variant']} | {passes[0]} | {passes[1]} | {_us(b)} | {_ratio(best, 'eager', b)} | "
                         f"{_ratio(best, 'inductor', b)} | {r.get('rel_err', float('nan')):.2e} |"
                         + (f" error: {r['error']}" if r.get("error") else ""))
        lines.append("")
    return "\n".join(lines)


def _ratio(best: dict[str, float], base: str, mine: float | None) -> str:
    return f"{best[base] / mine:.3f}" if mine and base in best else "-"


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def cmd_report(args: argparse.Namespace) -> int:
    print(report_text(Path(args.dir)))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("dir")
    for k, v in SIZES.items():
        b.add_argument(f"--{k.replace('_', '-')}", dest=k, type=int, default=v)
    b.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    b.add_argument("--k", type=int, default=4)
    b.add_argument("--region-ops", type=int, default=24)
    for name in ("measure", "save", "report"):
        sub.add_parser(name).add_argument("dir")
    t = sub.add_parser("time")
    t.add_argument("dir")
    t.add_argument("--variants", nargs="*", choices=VARIANTS)
    f = sub.add_parser("profile")
    f.add_argument("dir")
    f.add_argument("--variants", nargs="*", choices=VARIANTS)
    args = ap.parse_args(argv)
    return {"build": cmd_build, "measure": cmd_measure, "save": cmd_save, "time": cmd_time, "profile": cmd_profile,
            "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
