"""Whole models through axon_eg's hybrid backend, against eager and torch.compile (issue 49).

    python benchmarks/models.py build   DIR [NAMES...]   # here (egglog, z3): phase 1, then, once measured, save
    python benchmarks/models.py measure DIR [NAMES...]   # GPU box (torch, triton): region rows, then model timings
    python benchmarks/models.py report  DIR [--write FILE.md]

``NAMES`` are corpus models (``benchmarks.models.MODELS``; default: every one whose packages are installed here;
with ``--corpus blocks`` before the verb, issue 51's transformer blocks, ``benchmarks.blocks.BLOCKS``, and
``measure --max-autotune`` also times ``torch.compile(mode="max-autotune-no-cudagraphs")``).
The flow is the backend's remote one, twice over, so that phase 1 runs where egglog and z3 are and phase 2 on
a bare GPU box:

1. ``build`` runs, per model in a child process of its own (``--timeout``; a crash or a hang is a row),
   ``ax.optimize(model, inputs, remote=DIR/remote)`` with the model and its inputs on the meta device (phase 1
   needs shapes only), at the ``--config`` sizes (``real``: published ones). It records in
   ``DIR/models/NAME/build.json`` the phase-1 seconds (the model's: ``ax.optimize``'s wall time in the first
   build, export and partition included, regions in parallel; and each region's), every region with its
   fate (bundled and waiting for rows, kept, or why it is not axon_eg's: refused by the importer, a baseline
   won), and the model's FLOPs and bytes with each region's (``partition.graph_work``);
2. ``measure`` (GPU) runs the worker over every region bundle of the named models without rows (each candidate checked against
   float64 and timed by the fixed harness, with the region's eager and Inductor baselines, compiled alone);
3. ``build`` again selects from those rows (phase 1 is a cache hit: this pass imports neither egglog nor z3,
   only polars and pyyaml besides torch, so it runs on the GPU box too and steps 2 to 4 fit one call there;
   ``tests/test_models_benchmark.py`` runs it with both hidden) and saves ``DIR/models/NAME/model_new.py``
   (``OptimizedModule.save``: imports torch and triton only; it runs the graph through ``torch.compile``, the
   kept regions as opaque custom ops);
4. ``measure`` again times (``--baselines``: also before step 3, eager and torch.compile alone), per model in a
   child process, eager, ``torch.compile(model)`` (default mode, its
   own process state: dynamo reset, compiled alone) and the saved ``ModelNew`` sharing the model's weights,
   each checked against the model in float64 on the same GPU (relative error of the flattened outputs;
   tolerance 1e-3 in float32, 3e-2 in bfloat16), then timed by ``harness.time_candidate`` (L2 flushed, CUDA
   events) in two passes, the second in the reverse order: ``DIR/models/NAME/timings.json``.

``report`` prints one row per model: phase-1 seconds, regions kept of all, the share of FLOPs and bytes in
axon_eg's kernels, the best latency of each variant, axon_eg over torch.compile, the errors, and each reason
a region is not axon_eg's with its count. Every step is resumable: a model already done is skipped unless
``--force``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

VARIANTS = ("eager", "compile", "axon_eg")
TOLERANCE = {"float32": 1e-3, "bfloat16": 3e-2, "float16": 1e-2}


CORPUS = "models"
"""Which corpus the names are of (``--corpus``): ``models`` (:mod:`benchmarks.models`) or ``blocks``
(:mod:`benchmarks.blocks`, issue 51's transformer blocks)."""


def _corpus() -> dict:
    if CORPUS == "blocks":
        from benchmarks.blocks import BLOCKS

        return BLOCKS
    from benchmarks.models import MODELS

    return MODELS


def _names(given: list[str]) -> list[str]:
    specs = _corpus()
    unknown = [n for n in given if n not in specs]
    if unknown:
        raise SystemExit(f"models.py: unknown {CORPUS[:-1]} {unknown[0]!r} (known: {', '.join(sorted(specs))})")
    return given or list(specs)


def _child(args: list[str], timeout: float) -> tuple[int, str]:
    """Run this script's hidden verb in a fresh process: (exit status, the tail of its output); a timeout is 124."""
    try:
        proc = subprocess.run([sys.executable, __file__, "--corpus", CORPUS, *args], capture_output=True, text=True,
                              timeout=timeout,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                  [str(ROOT), str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])})
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return 124, out[-2000:] + f"\n(timed out after {timeout:.0f} s)"
    return proc.returncode, (proc.stdout + proc.stderr)[-3000:]


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    tmp.replace(path)


# ------------------------------------------------------------------------------------------------
# build (here)
# ------------------------------------------------------------------------------------------------
def cmd_build(args: argparse.Namespace) -> int:
    out = Path(args.dir)
    for name in _names(args.names):
        mdir = out / "models" / name
        if (mdir / "model_new.py").exists() and not args.force:
            continue
        t0 = time.monotonic()
        code, tail = _child(["_build_one", str(out), name, "--config", args.config, "--k", str(args.k),
                             "--hw", args.hw] + (["--freeze"] if args.freeze else []), args.timeout)
        wall = time.monotonic() - t0
        if code != 0:
            old = json.loads((mdir / "build.json").read_text()) if (mdir / "build.json").exists() else {}
            _write(mdir / "build.json", {**old, "name": name, "error": tail.strip().splitlines()[-1] if tail.strip()
                                         else f"exit {code}", "exit": code, "wall_s": wall})
            print(f"{name}: failed ({code}) after {wall:.0f} s: {tail.strip().splitlines()[-1] if tail.strip() else ''}",
                  flush=True)
            continue
        built = json.loads((mdir / "build.json").read_text())
        waiting = sum(r["waiting"] for r in built["regions"])
        print(f"{name}: phase 1 {built['phase1_s']:.1f} s, {len(built['regions'])} regions, {waiting} waiting for rows, "
              f"{sum(bool(r['kernel']) for r in built['regions'])} kept" + (", saved" if built.get("saved") else ""),
              flush=True)
    return 0


def _build_one(args: argparse.Namespace) -> int:
    import torch

    import axon_eg as ax

    out, name = Path(args.dir), args.name
    spec = _corpus()[name]
    mdir = out / "models" / name
    old = json.loads((mdir / "build.json").read_text()) if (mdir / "build.json").exists() else {}
    with torch.device("meta"):
        model = spec.build(args.config)
    inputs = tuple(a.to("meta") for a in spec.inputs(args.config, 0))
    t0 = time.monotonic()
    opt = ax.optimize(model, inputs, remote=str(out / "remote"), k=args.k, hw=args.hw, freeze=args.freeze)
    wall = time.monotonic() - t0
    key = next(iter(opt.compiled.work))
    flops, moved = opt.compiled.work[key]
    regions = [{"name": r.name, "ops": r.ops, "kernel": r.kernel, "why_torch": r.why_torch, "bundle": r.bundle,
                "waiting": bool(r.why_torch and r.why_torch.startswith("not measured yet")),
                "phase1_s": r.phase1_s, "seconds": r.seconds, "flops": r.flops, "bytes": r.bytes} for r in opt.report]
    first = old.get("first_build") or {"wall_s": wall, "regions_phase1_s": [r.phase1_s for r in opt.report]}
    built = {"name": name, "family": spec.family, "source": spec.source, "dtype": str(spec.dtype).removeprefix("torch."),
             "config": args.config, "k": args.k, "hw": args.hw, "freeze": args.freeze, "first_build": first,
             "phase1_s": first["wall_s"],
             "wall_s": wall, "flops": flops, "bytes": moved, "regions": regions, "saved": False}
    if not any(r["waiting"] for r in regions):
        opt.save(mdir / "model_new.py")
        built["saved"] = True
    _write(mdir / "build.json", built)
    return 0


# ------------------------------------------------------------------------------------------------
# measure (GPU box)
# ------------------------------------------------------------------------------------------------
def cmd_measure(args: argparse.Namespace) -> int:
    from axon_eg.measure.cli import main as worker
    from axon_eg.measure.worker import ROWS_NAME

    out = Path(args.dir)
    names = _names(args.names)
    wanted = [r["bundle"] for n in names if (out / "models" / n / "build.json").exists()
              for r in json.loads((out / "models" / n / "build.json").read_text()).get("regions", []) if r["bundle"]]
    bundles = [b for b in dict.fromkeys(wanted)  # the models' order: a cut-off run has measured the first ones
               if (Path(b) / "manifest.json").is_file() and not (Path(b) / ROWS_NAME).is_file()]
    if bundles:
        print(f"measuring {len(bundles)} region bundles", flush=True)
        worker(bundles + (["--cpu"] if args.cpu else ["--warm", str(args.warm)]))
    for name in names:
        mdir = out / "models" / name
        saved = (mdir / "model_new.py").exists()
        done = json.loads((mdir / "timings.json").read_text()) if (mdir / "timings.json").exists() else {}
        if not (saved or args.baselines) or not (mdir / "build.json").exists() or \
                (done and not args.force and (done.get("saved") or not saved)):
            continue
        t0 = time.monotonic()
        code, tail = _child(["_time_one", str(out), name] + (["--cpu"] if args.cpu else [])
                            + (["--max-autotune"] if args.max_autotune else []), args.timeout)
        if code != 0:
            _write(mdir / "timings.json", {"name": name, "error": tail.strip().splitlines()[-1] if tail.strip()
                                           else f"exit {code}", "exit": code})
        print(f"{name}: timed in {time.monotonic() - t0:.0f} s" + (f" (failed: {code})" if code else ""), flush=True)
    return 0


def _flat(out) -> list:
    import torch
    from torch.utils._pytree import tree_leaves

    if hasattr(out, "to_tuple"):  # a transformers ModelOutput
        out = out.to_tuple()
    return [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def _rel(got, want) -> float:
    errs = [float((g.double() - w).norm() / max(float(w.norm()), 1e-30)) for g, w in zip(_flat(got), _flat(want))]
    return max(errs) if errs else float("nan")


def _time_one(args: argparse.Namespace) -> int:
    import copy
    import gc
    import importlib.util

    import torch

    from axon_eg.measure.harness import time_candidate

    out, name = Path(args.dir), args.name
    mdir = out / "models" / name
    built = json.loads((mdir / "build.json").read_text())
    spec = _corpus()[name]
    saved = None
    if (mdir / "model_new.py").exists():
        mod_spec = importlib.util.spec_from_file_location(f"axon_eg_model_new_{name}", mdir / "model_new.py")
        saved = importlib.util.module_from_spec(mod_spec)
        sys.modules[mod_spec.name] = saved
        mod_spec.loader.exec_module(saved)
    variants = VARIANTS if saved is not None else VARIANTS[:2]  # not saved yet: the baselines alone
    if args.max_autotune:
        variants = (*variants[:2], "compile_max", *variants[2:])
    device = "cpu" if args.cpu else "cuda"
    model = spec.build(built["config"]).to(device).eval()
    inputs = tuple(a.to(device) for a in spec.inputs(built["config"], 0))
    with torch.no_grad():
        ref = copy.deepcopy(model).double()
        want = ref(*(a.double() if a.is_floating_point() else a for a in inputs))
        del ref
    if device == "cuda":
        torch.cuda.empty_cache()
    tol = TOLERANCE.get(built["dtype"], 1e-3)
    rows: dict[str, dict] = {v: {"variant": v, "median_us": [], "iqr_us": []} for v in variants}

    def make(variant: str):
        torch._dynamo.reset()
        if variant == "compile":
            return torch.compile(model)
        if variant == "compile_max":
            return torch.compile(model, mode="max-autotune-no-cudagraphs")
        if variant == "axon_eg":
            return saved.ModelNew.from_module(model)
        return model

    for p, order in enumerate((variants, variants[::-1])):
        for variant in order:
            row = rows[variant]
            gc.collect()
            if device == "cuda":
                torch.cuda.empty_cache()
            fn = None
            try:
                fn = make(variant)
                with torch.inference_mode():
                    t0 = time.monotonic()
                    got = fn(*inputs)
                    if device == "cuda":
                        torch.cuda.synchronize()
                    row.setdefault("first_call_s", time.monotonic() - t0)
                    row["rel_err"] = max(row.get("rel_err", 0.0), _rel(got, want))
                    row["correct"] = bool(row["rel_err"] <= tol)
                    t = time_candidate(lambda f=fn: f(*inputs), [], seed=p, mode="return", device=device)
                row["median_us"].append(t["median_us"])
                row["iqr_us"].append(t["iqr_us"])
            except Exception as exc:  # noqa: BLE001 - a variant that fails is a row; the others still run
                row["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:300]
            finally:
                fn = None
            _write(mdir / "timings.json", {"name": name, "device": torch.cuda.get_device_name() if device == "cuda"
                                           else "cpu (Triton interpreter: correctness only)", "torch": torch.__version__,
                                           "triton": __import__("triton").__version__, "tolerance": tol,
                                           "saved": saved is not None,
                                           "rows": list(rows.values())})
    return 0


# ------------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------------
def _best(row: dict | None) -> float | None:
    vals = [v for v in (row or {}).get("median_us", []) if v]  # None on the CPU
    return min(vals) if vals else None


def _reason(why: str) -> str:
    """A region's reason to be torch's, without what varies per region (op arguments, bundle paths)."""
    if why.startswith("not measured yet"):
        return "not measured yet"
    if why.startswith("the selection is "):
        return why
    return why.split(": ", 1)[-1][:90] if len(why) > 90 else why


def report_text(out: Path) -> str:
    lines: list[str] = []
    devices = set()
    rows = []
    reasons: Counter[str] = Counter()
    with_max = False  # a run with --max-autotune: its columns are shown
    for bfile in sorted((out / "models").glob("*/build.json")):
        b = json.loads(bfile.read_text())
        tfile = bfile.with_name("timings.json")
        t = json.loads(tfile.read_text()) if tfile.exists() else {}
        if t.get("device"):
            devices.add(t["device"])
        by = {r["variant"]: r for r in t.get("rows", [])}
        regions = b.get("regions", [])
        kept = [r for r in regions if r["kernel"]]
        for r in regions:
            if not r["kernel"] and r["why_torch"]:
                reasons[_reason(r["why_torch"])] += 1
        eager, comp, mine = (_best(by.get(v)) for v in VARIANTS)
        cmax = _best(by.get("compile_max"))
        with_max = with_max or cmax is not None
        rows.append({"name": b["name"], "dtype": b.get("dtype", "?"), "phase1": b.get("phase1_s"),
                     "regions": f"{len(kept)}/{len(regions)}",
                     "flops": sum(r["flops"] for r in kept) / b["flops"] if b.get("flops") else None,
                     "bytes": sum(r["bytes"] for r in kept) / b["bytes"] if b.get("bytes") else None,
                     "eager": eager, "compile": comp, "axon_eg": mine, "compile_max": cmax,
                     "vs_max": cmax / mine if cmax and mine else None,
                     "vs_compile": comp / mine if comp and mine else None, "vs_eager": eager / mine if eager and mine else None,
                     "errors": " / ".join(f"{by[v].get('rel_err', float('nan')):.1e}"
                                          + ("" if by[v].get("correct", True) else "!") for v in VARIANTS if v in by),
                     "note": b.get("error") or t.get("error") or "; ".join(f"{v}: {by[v]['error']}" for v in VARIANTS
                                                                           if by.get(v, {}).get("error"))})

    def f(v: float | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    lines += [f"Device: {', '.join(sorted(devices)) or '(not timed)'}; latencies in us, each variant's best of two passes; "
              "errors: relative to float64 (eager / compile / axon_eg; ! over tolerance).", "",
              "| model | dtype | phase 1 s | regions kept | FLOPs in axon_eg | bytes in axon_eg | eager | torch.compile | "
              + ("max-autotune | " if with_max else "") + "axon_eg | vs compile | "
              + ("vs max-autotune | " if with_max else "") + "vs eager | errors | note |",
              "|---|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if with_max else "") + "---:|---:|"
              + ("---:|" if with_max else "") + "---:|---|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['dtype']} | {f(r['phase1'], '.1f')} | {r['regions']} | {f(r['flops'], '.0%')} | "
                     f"{f(r['bytes'], '.0%')} | {f(r['eager'], '.1f')} | {f(r['compile'], '.1f')} | "
                     + (f"{f(r['compile_max'], '.1f')} | " if with_max else "") + f"{f(r['axon_eg'], '.1f')} | "
                     f"{f(r['vs_compile'], '.3f')} | " + (f"{f(r['vs_max'], '.3f')} | " if with_max else "")
                     + f"{f(r['vs_eager'], '.3f')} | {r['errors']} | {r['note'][:80]} |")
    ratios = [r["vs_compile"] for r in rows if r["vs_compile"]]
    p1 = sorted(r["phase1"] for r in rows if r["phase1"] is not None)
    lines += ["", f"Models: {len(rows)}; timed: {len(ratios)}; geomean axon_eg vs torch.compile: "
              f"{f(math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None, '.3f')}; slower than "
              f"torch.compile (< 0.995): {sum(x < 0.995 for x in ratios)}; phase 1: median "
              f"{f(p1[len(p1) // 2] if p1 else None, '.1f')} s, max {f(p1[-1] if p1 else None, '.1f')} s.", "",
              "Regions that are not axon_eg's, by reason:", "", "| regions | reason |", "|---:|---|"]
    lines += [f"| {n} | {why} |" for why, n in reasons.most_common()]
    return "\n".join(lines + ["", *region_lines(out)])


def region_lines(out: Path) -> list[str]:
    """One row per measured region bundle of the built models: its best correct candidate against the region's
    eager and Inductor (torch.compile, default mode) baselines, from the bundle's rows (each baseline compiled
    alone by the worker), and whether the region was kept."""
    lines = ["Regions measured (each bundle's rows; latencies in us):", "",
             "| model | region | device | candidates ok / rows | best candidate | eager | Inductor | vs Inductor | kept |",
             "|---|---|---|---:|---:|---:|---:|---:|---|"]
    for bfile in sorted((out / "models").glob("*/build.json")):
        b = json.loads(bfile.read_text())
        for r in b.get("regions", []):
            rfile = Path(r["bundle"] or "") / "rows.jsonl"
            if not r["bundle"] or not rfile.is_file():
                continue
            rows = [json.loads(ln) for ln in rfile.read_text().splitlines() if ln.strip()]
            base = {x["id"]: x.get("median_us") for x in rows if x.get("kind") == "baseline" and x.get("status") == "ok"}
            ok = [x["median_us"] for x in rows if x.get("kind") != "baseline" and x.get("status") == "ok"
                  and x.get("median_us")]
            best, ind = (min(ok) if ok else None), base.get("torch_compile_default")
            device = str(rows[0].get("device", "?")) if rows else "?"

            def f(v: float | None) -> str:
                return "-" if v is None else f"{v:.1f}"

            lines.append(f"| {b['name']} | {r['name']} | {device} | {len(ok)} / {len(rows)} | {f(best)} | "
                         f"{f(base.get('torch_eager'))} | {f(ind)} | "
                         f"{'-' if not (ind and best) else format(ind / best, '.3f')} | "
                         f"{'yes' if r['kernel'] else 'no'} |")
    return lines


def cmd_report(args: argparse.Namespace) -> int:
    text = report_text(Path(args.dir))
    print(text)
    if args.write:
        Path(args.write).write_text(text + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="models", choices=("models", "blocks"),
                    help="benchmarks.models (default) or benchmarks.blocks (issue 51's transformer blocks)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="here: phase 1 per model; once measured, select and save ModelNew")
    b.add_argument("dir")
    b.add_argument("names", nargs="*")
    b.add_argument("--config", default="real", choices=("small", "real"))
    b.add_argument("--k", type=int, default=4)
    b.add_argument("--hw", default="h200")
    b.add_argument("--timeout", type=float, default=900.0, help="seconds per model (default 900)")
    b.add_argument("--force", action="store_true")
    b.add_argument("--freeze", action="store_true", help="the model's parameters are constant (inference): what "
                   "depends on them alone is computed once, e.g. stacked or gain-folded weights (``freeze=True``)")
    m = sub.add_parser("measure", help="GPU box: region rows, then each saved model timed")
    m.add_argument("dir")
    m.add_argument("names", nargs="*")
    m.add_argument("--timeout", type=float, default=600.0, help="seconds per model's timing (default 600)")
    m.add_argument("--force", action="store_true")
    m.add_argument("--baselines", action="store_true", help="also time eager and torch.compile of models not "
                   "saved yet (their ModelNew is timed by a later measure, which times the three again)")
    m.add_argument("--warm", type=int, default=8, metavar="N", help="compile the candidates N at once, untimed, "
                   "before they are timed one at a time (python -m axon_eg.measure --warm; default 8; 0: off)")
    m.add_argument("--cpu", action="store_true", help="no GPU: the worker on the CPU and correctness only (a smoke run)")
    m.add_argument("--max-autotune", action="store_true", help="also time torch.compile(mode="
                   "'max-autotune-no-cudagraphs'), compiled alone (variant compile_max)")
    r = sub.add_parser("report")
    r.add_argument("dir")
    r.add_argument("--write", metavar="FILE.md")
    one = sub.add_parser("_build_one")
    one.add_argument("dir")
    one.add_argument("name")
    one.add_argument("--config", default="real")
    one.add_argument("--k", type=int, default=4)
    one.add_argument("--hw", default="h200")
    one.add_argument("--freeze", action="store_true")
    t = sub.add_parser("_time_one")
    t.add_argument("dir")
    t.add_argument("name")
    t.add_argument("--cpu", action="store_true")
    t.add_argument("--max-autotune", action="store_true")
    args = ap.parse_args(argv)
    global CORPUS
    CORPUS = args.corpus
    return {"build": cmd_build, "measure": cmd_measure, "report": cmd_report, "_build_one": _build_one,
            "_time_one": _time_one}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
