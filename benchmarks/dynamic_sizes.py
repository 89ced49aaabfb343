"""Shape-generic kernels against static ones (issue 20's targets), the cost model choosing in both.

    python benchmarks/dynamic_sizes.py build DIR        # here: phase 1 (CPU), writes kernel files + plan.json
    python benchmarks/dynamic_sizes.py run DIR          # GPU box: times every pair twice, writes DIR/rows.json
    python benchmarks/dynamic_sizes.py report DIR       # the two tables (standard library only)

Table 1 (``tuned``): for each suite program at its H200 sizes, the top-ranked candidate emitted static and
shape-generic over the bucket (size // 8, size] of its leading dim, both called at the tuned size: the
generic one's cost. Table 2 (``sweep``): a program optimized once for M in {1, 16, 128, 1024, 4096, 16384}
(the top candidate of each bucket, generic over it), called at 20 sizes of M across [1, 16384], against
the top candidate emitted static for that M alone. Both sides take the cost model's first candidate (no
empirical selection on either side), so the difference is what a run-time dim costs. ``run`` checks each
generic kernel against the static one on the same inputs before timing (``harness.time_candidate``: L2
flushed, medians of steady batches), and times every kernel twice, in two passes.
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
    from axon_eg.backends.triton.emit import runs_as_torch
    from axon_eg.extract.candidates import enumerate_candidates
    from axon_eg.pipeline import _saturated

    cands, _ = enumerate_candidates(_saturated(program, 2.0), hw, 1, fallback=runs_as_torch)
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
    for name, fixed in SWEEP.items():
        base = suite.get(name).program.bind(fixed)
        built = {}
        for lo, hi in zip([0, *BUCKETS], BUCKETS):
            program = base.bind(M=hi)
            ranges = {"M": (lo + 1, hi)} if lo + 1 < hi else None
            kernel = emit(_top(program, hw), hw, f"{name}_b{hi}", ranges=ranges)
            ok = not ranges or kernel.meta["generic"]
            built[(lo + 1, hi)] = write(kernel, f"{name}_b{hi}") if ok else None
            print(f"{name} bucket [{lo + 1}, {hi}]: {kernel.meta['lowering']} "
                  f"{'ok' if ok else 'NOT generic: ' + kernel.meta['generic_why']}", flush=True)
        for m in SWEEP_M:
            program = base.bind(M=m)
            bucket = next(b for b in built if b[0] <= m <= b[1])
            static = emit(_top(program, hw), hw, f"{name}_m{m}")
            plan["sweep"].append(entry(program, write(static, f"{name}_m{m}"), built[bucket], program=name, M=m,
                                       bucket=list(bucket), lowering=static.meta["lowering"]))
    (out / "plan.json").write_text(json.dumps(plan, indent=1))
    return 0


def _load(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod.kernel


def cmd_run(args: argparse.Namespace) -> int:
    import torch

    from axon_eg.measure import harness

    d = Path(args.dir)
    plan = json.loads((d / "plan.json").read_text())
    rows = []
    fns: dict = {}
    for table in ("tuned", "sweep"):
        for e in plan[table]:
            if not e["generic"]:
                rows.append({**e, "table": table, "error": e.get("not_generic") or "no generic kernel"})
                continue
            row = {**e, "table": table}
            try:
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
            except Exception as exc:  # one failing pair is a row, not an aborted run
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            rows.append(row)
            print(_line(row), flush=True)
    (d / "rows.json").write_text(json.dumps([{k: v for k, v in r.items() if k != "specs"} for r in rows], indent=1))
    return 0


def _line(r: dict) -> str:
    what = r.get("program") + (f" M={r['M']} (bucket {r['bucket']})" if "M" in r else f" {r['dim']}={r['size']}")
    if r.get("error"):
        return f"{what}: {r['error']}"
    s = min(r["static_us_1"], r["static_us_2"])
    g = min(r["generic_us_1"], r["generic_us_2"])
    return (f"{what}: static {r['static_us_1']:.2f}/{r['static_us_2']:.2f} us, generic {r['generic_us_1']:.2f}/"
            f"{r['generic_us_2']:.2f} us, generic/static {g / s:.3f}, rel err {r['rel_err_vs_static']:.1e}")


def cmd_report(args: argparse.Namespace) -> int:
    rows = json.loads((Path(args.dir) / "rows.json").read_text())
    for table, title in (("tuned", "At the tuned size: generic over (size/8, size] vs static"),
                         ("sweep", "Optimized once for M in {1, 16, 128, 1024, 4096, 16384}, called at M")):
        print(f"\n{title}\n")
        print("| program | size | lowering | static us (2 runs) | generic us (2 runs) | generic / static | rel err |")
        print("|---|---|---|---|---|---|---|")
        ratios = []
        for r in (r for r in rows if r["table"] == table):
            size = f"M={r['M']} in {r['bucket']}" if "M" in r else f"{r['dim']}={r['size']}"
            if r.get("error"):
                print(f"| {r['program']} | {size} | {r.get('lowering', '')} | | | {r['error'][:80]} | |")
                continue
            s, g = min(r["static_us_1"], r["static_us_2"]), min(r["generic_us_1"], r["generic_us_2"])
            ratios.append(g / s)
            print(f"| {r['program']} | {size} | {r['lowering']} | {r['static_us_1']:.2f} / {r['static_us_2']:.2f} | "
                  f"{r['generic_us_1']:.2f} / {r['generic_us_2']:.2f} | {g / s:.3f} | {r['rel_err_vs_static']:.1e} |")
        if ratios:
            geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
            print(f"\ngeomean generic/static {geo:.3f}, worst {max(ratios):.3f} over {len(ratios)} rows")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("dir")
    b.add_argument("--programs", nargs="*", default=None)
    for name in ("run", "report"):
        sub.add_parser(name).add_argument("dir")
    args = p.parse_args(argv)
    return {"build": cmd_build, "run": cmd_run, "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
