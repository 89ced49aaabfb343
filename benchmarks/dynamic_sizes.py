"""Shape-generic kernels against static ones (issue 20's targets).

    python benchmarks/dynamic_sizes.py build DIR        # here: phase 1 (CPU), writes kernels, bundles, plan.json
    python benchmarks/dynamic_sizes.py run DIR          # GPU box: measures, chooses, times every pair twice
    python benchmarks/dynamic_sizes.py report DIR       # the tables (standard library only)

Table 1 (``tuned``): for each suite program at its H200 sizes, the cost model's top candidate emitted
static and shape-generic over the bucket (size // 8, size] of its leading dim, both called at the tuned
size: the generic one's cost, nothing chosen empirically on either side.

Table 2 (``sweep``): a program optimized once for M in {1, 16, 128, 1024, 4096, 16384}, as
``saturate_and_extract(sizes=...)`` does it: per bucket, phase 1 (``pipeline.write_bundle_only`` with the
bucket's ranges and a GPU device: the k best tilings at the bucket's tuned end, low end and middle, each
generic over the bucket) and phase 2 (the worker over the bundle's candidates, each checked and timed at
the three sizes) and the choice by worst ratio (``measure.spread.choice``). Against it, at each of 20 sizes
of M across [1, 16384], the kernel optimized for that M alone: the same phase 1 (static, k best) and phase
2 (the worker; the fastest). Baselines are not measured (they play no part in the comparison). Every
chosen pair is then checked against each other on the same inputs and timed twice in two passes
(``harness.time_candidate``: L2 flushed, medians of steady batches), and once more as a CUDA graph
replay of 20 calls (device time per call, without the host's launch work).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

TUNED = ["silu", "gelu_mul", "add", "softmax", "log_softmax", "rmsnorm", "layernorm", "residual_rmsnorm", "rope",
         "sum", "cumsum", "transpose", "matmul", "matmul_bias_gelu", "rmsnorm_matmul", "gated_mlp"]
SWEEP = {"rmsnorm": {"N": 4096}, "matmul_bias_gelu": {"K": 4096, "N": 4096}}
BUCKETS = [1, 16, 128, 1024, 4096, 16384]
SWEEP_M = sorted({max(1, round(16384 ** (k / 19))) for k in range(20)})  # 20 sizes, log-spaced over [1, 16384]


def _top(program, hw):
    from axon_eg.backends.triton.backend import TRITON
    from axon_eg.backends.triton.emit import runs_as_torch
    from axon_eg.extract.candidates import enumerate_candidates
    from axon_eg.saturation import saturated

    cands, _ = enumerate_candidates(saturated(program, 2.0), hw, 1, backend=TRITON, fallback=runs_as_torch)
    return cands[0]


def _leading(program) -> str:
    return next(d for d in ("M", "B", "S", "T", "N") if d in program.bindings)


def cmd_build(args: argparse.Namespace) -> int:
    from axon_eg.backends.kernel import input_specs, output_dtypes
    from axon_eg.backends.triton.emit import emit
    from axon_eg.hw import load
    from benchmarks import suite

    hw = load("h200")
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    plan: dict = {"tuned": [], "sweep": []}

    def write(kernel, tag: str) -> str:
        path = out / f"{tag}.py"
        path.write_text(kernel.source)
        return path.name

    def entry(prog, static, generic, **extra) -> dict:
        return {"specs": input_specs(prog), "out_shapes": [list(prog.concrete_shape(o)) for o in prog.outputs],
                "out_dtypes": output_dtypes(prog), "static": static, "generic": generic, **extra}

    for name in args.programs or TUNED:
        program = suite.get(name).bound(small=False)
        dim = _leading(program)
        size = program.bindings[dim]
        c = _top(program, hw)
        static = emit(c, hw, f"{name}_static")
        generic = emit(c, hw, f"{name}_generic", ranges={dim: (max(2, size // 8 + 1), size)})
        why = "" if generic.meta["generic"] else generic.meta["generic_why"]
        plan["tuned"].append(entry(program, write(static, f"{name}_static"), write(generic, f"{name}_generic") if not why
                                   else None, program=name, dim=dim, size=size, lowering=static.meta["lowering"],
                                   not_generic=why))
        print(f"{name}: {dim}={size} {static.meta['lowering']} {'generic' if not why else 'NOT generic: ' + why}", flush=True)
    from axon_eg.pipeline import write_bundle_only

    for name in args.sweep:
        base = suite.get(name).program.bind(SWEEP[name])
        cache = out / "cache"
        built = {}
        for lo, hi in zip([0, *BUCKETS], BUCKETS):
            ranges = {"M": (lo + 1, hi)} if lo + 1 < hi else None
            bdir = write_bundle_only(base.bind(M=hi), k=args.k, cache_dir=cache, device="cuda", ranges=ranges)
            built[(lo + 1, hi)] = str(bdir.relative_to(out))
            print(f"{name} bucket [{lo + 1}, {hi}]: {bdir.name}", flush=True)
        for m in SWEEP_M:
            program = base.bind(M=m)
            bucket = next(b for b in built if b[0] <= m <= b[1])
            bdir = write_bundle_only(program, k=args.k, cache_dir=cache, device="cuda")
            plan["sweep"].append(entry(program, str(bdir.relative_to(out)), built[bucket], program=name, M=m,
                                       bucket=list(bucket)))
    (out / "plan.json").write_text(json.dumps(plan, indent=1))
    return 0


def _load(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod.kernel


def _choose(d: Path, bundle: str, chosen: dict) -> str:
    """Phase 2 over one bundle's candidates (rows kept in ``DIR/rows/``, so a rerun resumes) and the choice
    (``measure.spread.choice``, as the selection makes it); returns the chosen kernel's file, relative to DIR."""
    if bundle not in chosen:
        from axon_eg.measure import spread
        from axon_eg.measure.manifest import load_manifest, read_rows
        from axon_eg.measure.worker import run_bundle

        bdir = d / bundle
        ids = [c["id"] for c in load_manifest(bdir) if c.get("kind") == "candidate"]
        out = d / "rows" / f"{bdir.name}.jsonl"
        out.parent.mkdir(exist_ok=True)
        run_bundle(bdir, out, ids=ids)
        rows = [r for r in read_rows(out) if r["id"] in ids]
        best = spread.choice(rows)
        meta = {r["id"]: r for r in json.loads((bdir / "candidates.json").read_text())}
        worst = spread.worst_ratios(r for r in rows if r.get("status") == "ok")
        top = next((i for i in ids if meta.get(i, {}).get("rank") == 0), None)
        chosen[bundle] = {"file": f"{bundle}/{best}.py" if best else None, "id": best,
                          "tuned_at": meta.get(best, {}).get("tuned_at"), "tilings": meta.get(best, {}).get("tilings"),
                          "lowering": meta.get(best, {}).get("lowering"),
                          "worst": worst.get(best), "top_worst": worst.get(top), "top": top,
                          "statuses": {r["id"]: r["status"] for r in rows},
                          "times": {r["id"]: {"": r.get("median_us"), **json.loads(r.get("probe_us") or "{}")}
                                    for r in rows}}
        print(f"  {bundle}: chose {best} (tuned at {chosen[bundle]['tuned_at'] or 'the tuned size'}, worst ratio "
              f"{chosen[bundle]['worst']}, the tuned size's first {chosen[bundle]['top_worst']})", flush=True)
    return chosen[bundle]["file"]


def _graph_us(fn, inputs: list, outs: list, calls: int = 20) -> float:
    """Device time per call of ``fn`` replayed from a CUDA graph of ``calls`` calls (no host launch work)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn(*inputs, *outs)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn(*inputs, *outs)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(5):
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) * 1000.0 / calls)
    return best


def cmd_run(args: argparse.Namespace) -> int:
    import torch

    from axon_eg.measure import harness

    d = Path(args.dir)
    plan = json.loads((d / "plan.json").read_text())
    rows = []
    fns: dict = {}
    chosen: dict = {}
    for table in args.tables:
        for e in plan[table]:
            if args.programs and e["program"] not in args.programs:
                continue
            row = {**e, "table": table}
            try:
                if table == "sweep":
                    e = {**e, "static": _choose(d, e["static"], chosen), "generic": _choose(d, e["generic"], chosen)}
                    row.update(static_choice=chosen[row["static"]], generic_choice=chosen[row["generic"]])
                if not e["generic"] or not e["static"]:
                    rows.append({**row, "error": e.get("not_generic") or "no kernel chosen"})
                    continue
                for side in ("static", "generic"):
                    fns.setdefault(e[side], _load(d / e[side]))
                inputs = harness.make_inputs(e["specs"], 0, "cuda")
                outs = {}
                for side in ("static", "generic"):
                    o = [torch.empty(s, dtype=harness.TORCH_DTYPES[t], device="cuda")
                         for s, t in zip(e["out_shapes"], e["out_dtypes"])]
                    for t in o:
                        t.fill_(float("nan"))
                    fns[e[side]](*inputs, *o)
                    outs[side] = o
                torch.cuda.synchronize()
                err = max(float(((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item())
                          for a, b in zip(outs["generic"], outs["static"]))
                row["rel_err_vs_static"] = err
                for rep in (1, 2):
                    for side in ("static", "generic"):
                        t = harness.time_candidate(fns[e[side]], e["specs"], device="cuda", mode="dps",
                                                   out_shapes=[tuple(s) for s in e["out_shapes"]],
                                                   out_dtypes=e["out_dtypes"])
                        row[f"{side}_us_{rep}"] = t["median_us"]
                if table == "sweep":
                    for side in ("static", "generic"):
                        row[f"{side}_graph_us"] = _graph_us(fns[e[side]], inputs, outs[side])
            except Exception as exc:  # one failing pair is a row, not an aborted run
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            rows.append(row)
            print(_line(row), flush=True)
    previous = json.loads((d / "rows.json").read_text()) if (d / "rows.json").exists() else []
    keep = [r for r in previous if r["table"] not in args.tables or (args.programs and r["program"] not in args.programs)]
    (d / "rows.json").write_text(json.dumps(keep + [{k: v for k, v in r.items() if k != "specs"} for r in rows], indent=1))
    return 0


def _line(r: dict) -> str:
    what = r.get("program") + (f" M={r['M']} (bucket {r['bucket']})" if "M" in r else f" {r['dim']}={r['size']}")
    if r.get("error"):
        return f"{what}: {r['error']}"
    s, g = _sides(r)
    return (f"{what}: static {r['static_us_1']:.2f}/{r['static_us_2']:.2f} us, generic {r['generic_us_1']:.2f}/"
            f"{r['generic_us_2']:.2f} us, generic/static {g / s:.3f}, rel err {r['rel_err_vs_static']:.1e}")


def _sides(r: dict) -> tuple[float, float]:
    """(static, generic): each side's faster pass."""
    return min(r["static_us_1"], r["static_us_2"]), min(r["generic_us_1"], r["generic_us_2"])


def _geomean(ratios: list[float]) -> str:
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
    return f"geomean {geo:.3f}, worst {max(ratios):.3f} over {len(ratios)} rows"


def _tile(choice: dict) -> str:
    """The chosen kernel's first tiling, short (``64x64x128 s1``), and where it was tuned."""
    t = json.loads(choice.get("tilings") or "[{}]")[0]
    keys = ("BLOCK_M", "BLOCK_N", "BLOCK_K")
    text = "x".join(str(t[k]) for k in keys) + (f" s{t['SPLIT_K']}" if "SPLIT_K" in t else "") \
        if all(k in t for k in keys) else " ".join(f"{k}={v}" for k, v in t.items() if k.isupper())
    return text + (f" @{choice['tuned_at']}" if choice.get("tuned_at") else "") + \
        (f" ({choice['lowering']})" if choice.get("lowering") else "")


def cmd_report(args: argparse.Namespace) -> int:
    rows = json.loads((Path(args.dir) / "rows.json").read_text())
    tuned = [r for r in rows if r["table"] == "tuned"]
    if tuned:
        print("\nAt the tuned size: generic over (size/8, size] vs static (the cost model's first candidate)\n")
        print("| program | size | lowering | static us (2 runs) | generic us (2 runs) | generic / static | rel err |")
        print("|---|---|---|---|---|---|---|")
        ratios = []
        for r in tuned:
            size = f"{r['dim']}={r['size']}"
            if r.get("error"):
                print(f"| {r['program']} | {size} | {r.get('lowering', '')} | | | {r['error'][:80]} | |")
                continue
            s, g = _sides(r)
            ratios.append(g / s)
            print(f"| {r['program']} | {size} | {r['lowering']} | {r['static_us_1']:.2f} / {r['static_us_2']:.2f} | "
                  f"{r['generic_us_1']:.2f} / {r['generic_us_2']:.2f} | {g / s:.3f} | {r['rel_err_vs_static']:.1e} |")
        if ratios:
            print(f"\ngeneric/static: {_geomean(ratios)}")
    sweep = [r for r in rows if r["table"] == "sweep"]
    if not sweep:
        return 0
    print("\nEach bucket's choice (the worst ratio of its time to the fastest candidate's at the bucket's three "
          "sizes; the cost model's first candidate at the tuned size for comparison)\n")
    print("| program | bucket | chosen tiling (@ where tuned) | worst ratio | the tuned size's first: worst ratio |")
    print("|---|---|---|---|---|")
    seen = set()
    for r in sweep:
        c = r.get("generic_choice")
        if not c or (r["program"], tuple(r["bucket"])) in seen:
            continue
        seen.add((r["program"], tuple(r["bucket"])))
        fmt = lambda v: "" if v is None else f"{v:.3f}"  # noqa: E731
        print(f"| {r['program']} | {r['bucket']} | {_tile(c)} | {fmt(c.get('worst'))} | {fmt(c.get('top_worst'))} |")
    print("\nOptimized once for M in {1, 16, 128, 1024, 4096, 16384}, called at M, against the kernel optimized "
          "for that M alone (harness: per call; graph: device time per call in a CUDA graph replay)\n")
    print("| program | M (bucket) | static choice | generic choice | static us (2 runs) | generic us (2 runs) | "
          "generic / static | graph us static / generic | graph ratio | rel err |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    ratios, graphs = [], []
    for r in sweep:
        size = f"{r['M']} in {r['bucket']}"
        if r.get("error"):
            print(f"| {r['program']} | {size} | | | | | {r['error'][:80]} | | | |")
            continue
        s, g = _sides(r)
        ratios.append(g / s)
        graphs.append(r["generic_graph_us"] / r["static_graph_us"])
        print(f"| {r['program']} | {size} | {_tile(r['static_choice'])} | {_tile(r['generic_choice'])} | "
              f"{r['static_us_1']:.2f} / {r['static_us_2']:.2f} | {r['generic_us_1']:.2f} / {r['generic_us_2']:.2f} | "
              f"{g / s:.3f} | {r['static_graph_us']:.2f} / {r['generic_graph_us']:.2f} | {graphs[-1]:.3f} | "
              f"{r['rel_err_vs_static']:.1e} |")
    if ratios:
        print(f"\nper call, generic/static: {_geomean(ratios)}; graph replay: {_geomean(graphs)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("dir")
    b.add_argument("--programs", nargs="*", default=None, help="table 1's programs (default: all 16)")
    b.add_argument("--k", type=int, default=4, help="table 2: candidates per tuned size (default 4)")
    b.add_argument("--sweep", nargs="*", default=list(SWEEP), choices=list(SWEEP), help="table 2's programs")
    r = sub.add_parser("run")
    r.add_argument("dir")
    r.add_argument("--tables", nargs="*", default=["tuned", "sweep"], choices=["tuned", "sweep"])
    r.add_argument("--programs", nargs="*", default=None, help="only these programs' rows (the rest are kept)")
    sub.add_parser("report").add_argument("dir")
    args = p.parse_args(argv)
    return {"build": cmd_build, "run": cmd_run, "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
