"""Tile sweep: measure many tilings (and ISA choices) of one fusion group, to calibrate the candidate
ranking's tie-breaks against the GPU instead of guessing.

    python benchmarks/tile_sweep.py bundle DIR --program sum [--group G] [--limit 16] [--where EXPR] [--isa all]
    python benchmarks/tile_sweep.py bundle DIR --problem benchmarks/problems/losses/l07_....py [...]
    python -m axon_eg.measure DIR/<program>-g<G> --out DIR/<program>-g<G>/rows.jsonl     # GPU box
    python benchmarks/tile_sweep.py report DIR                                          # here or there

``bundle`` takes the program's best candidate (its variant and fusion plan), then for group G (default:
every group, one at a time) the ``--limit`` feasible tilings the ranking puts first (cost bucket, then
tie-break), optionally filtered by ``--where`` (a Python expression over the tiling's keys, e.g.
``"BLOCK_N >= 2048 and num_warps <= 8"``); the other groups keep the candidate's tilings. ``--isa all``
crosses them with every instruction choice of the plan. Each becomes one kernel of a bundle (no
baselines). ``report`` prints, per bundle, the tilings by measured time with the
achieved bandwidth of the whole kernel (the program's bytes over the time) and the rank the candidate
ranking gives them. ``run BUNDLE ID`` runs one kernel of a bundle a few times on the GPU, nothing else
(a target for ``ncu``: ``ncu --clock-control none -k regex:_g0 python benchmarks/tile_sweep.py run B ID``).
``report`` and ``run`` need only the standard library (and torch / triton for ``run``).
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


def sweep_candidates(program, hw, group: int | None, limit: int, where: str | None, all_isa: bool) -> list:
    """Candidates that differ from the program's best one in the tiling (and ISA) of one group."""
    from functools import partial

    from axon_eg.backends.triton.backend import TRITON
    from axon_eg.backends.triton.emit import runs_as_torch
    from axon_eg.extract.candidates import Candidate, enumerate_candidates, isa_choices
    from axon_eg.extract.tiling import bucket, group_cost, space, stored_tie_break, tilings
    from axon_eg.saturation import saturated

    fallback = partial(runs_as_torch, warp_size=int(max(hw.value("knobs.warp_size"))))
    (best,), _ = enumerate_candidates(saturated(program, 2.0), hw, 1, backend=TRITON, fallback=fallback)
    plan = best.plan
    out: list = []
    for gi in range(len(plan.groups)) if group is None else [group]:
        kind = plan.groups[gi].kind
        options, _ = tilings(space(plan, gi, hw, TRITON.templates))
        if where:
            options = [t for t in options if eval(where, {}, dict(t.values))]  # noqa: S307 (the user's own filter)
        ranked = sorted(options, key=lambda t: (bucket(group_cost(plan, gi, t, hw, TRITON)),
                                                *stored_tie_break(t, TRITON.templates, kind), t.values))
        isas = isa_choices(plan, hw, TRITON) if all_isa else [best.isa]
        for rank, t in enumerate(ranked[:limit]):
            chosen = tuple(t if j == gi else best.tilings[j] for j in range(len(plan.groups)))
            for isa in isas:
                report = TRITON.cost(plan, chosen, hw)
                c = Candidate(best.variant, plan, chosen, isa, report.seconds, report)
                out.append((gi, rank, c))
    return out


def cmd_bundle(args: argparse.Namespace) -> int:
    from axon_eg.backends.triton.emit import emit
    from axon_eg.bundle import write_bundle
    from axon_eg.hw import load
    from benchmarks import suite

    hw = load(args.hw)
    if args.problem:  # a KernelBench-format file: its module's SMALL_SIZES with --small
        from axon_eg.ir.torch_import import load_problem, small_sizes

        program = load_problem(args.problem, sizes=small_sizes(args.problem) if args.small else None).program
    else:
        program = suite.get(args.program).bound(small=args.small)
    by_group: dict[int, list] = {}
    for gi, rank, c in sweep_candidates(program, hw, args.group, args.limit, args.where, args.isa == "all"):
        by_group.setdefault(gi, []).append((rank, c))
    for gi, items in by_group.items():
        kernels = []
        for rank, c in items:
            values = dict(c.tilings[gi].values)
            isa = dict(c.isa).get(gi, "")
            name = "t" + "_".join(f"{v}" for v in values.values()) + ("_tma" if isa.endswith("+tma") else "")
            kern = emit(c, hw, name)
            kern.meta.update(sweep_group=gi, sweep_rank=rank, tiling=values, isa=isa,
                             predicted_us=c.predicted_seconds * 1e6)
            kernels.append(kern)
        bdir = Path(args.dir) / f"{program.name}-g{gi}"
        write_bundle(bdir, program, kernels, hw, timeout_s=120.0)
        nbytes = sum(math.prod(program.concrete_shape(i)) * program.nodes[i].dtype.itemsize for i in program.input_ids)
        nbytes += sum(math.prod(program.concrete_shape(o)) * program.nodes[o].dtype.itemsize for o in program.outputs)
        kind = items[0][1].plan.groups[gi].kind
        (bdir / "sweep.json").write_text(json.dumps({"program": program.name, "group": gi, "bytes": nbytes, "kind": kind}))
        print(f"{bdir}: {len(kernels)} tilings of group {gi} ({kind})")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    for bdir in sorted(p.parent for p in Path(args.dir).glob("*/sweep.json")):
        info = json.loads((bdir / "sweep.json").read_text())
        manifest = {c["id"]: c for c in json.loads((bdir / "manifest.json").read_text())["candidates"]}
        rows = []
        if (bdir / "rows.jsonl").exists():
            for line in (bdir / "rows.jsonl").read_text().splitlines():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        print(f"\n## {info['program']} group {info['group']} ({info['kind']}), {len(rows)} of {len(manifest)} measured")
        print(_calibration(info["kind"], manifest, rows))
        print("| rank | tiling | isa | predicted_us | median_us | TB/s | status |\n|---|---|---|---|---|---|---|")
        for r in sorted(rows, key=lambda r: (r.get("median_us") is None, r.get("median_us") or 0)):
            meta = manifest.get(r["id"], {}).get("meta", {})
            us = r.get("median_us")
            bw = f"{info['bytes'] / (us * 1e-6) / 1e12:.2f}" if us else ""
            print(f"| {meta.get('sweep_rank')} | {json.dumps(meta.get('tiling'))} | {meta.get('isa') or ''} | "
                  f"{meta.get('predicted_us', 0):.1f} | {us and round(us, 2)} | {bw} | {r['status']} |")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    import importlib.util

    import torch

    from axon_eg.measure import harness
    from axon_eg.measure.child import load_reference

    bundle = Path(args.bundle)
    cand = next(c for c in json.loads((bundle / "manifest.json").read_text())["candidates"] if c["id"] == args.id)
    spec = importlib.util.spec_from_file_location(args.id, bundle / cand["source"])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fn = getattr(mod, cand["entry"])
    inputs = harness.make_inputs(cand["inputs"], 0, "cuda")
    refs = harness.reference_outputs(load_reference(bundle, cand), 0, inputs)
    outputs = [torch.empty(tuple(r.shape), dtype=harness.TORCH_DTYPES[d], device="cuda")
               for r, d in zip(refs, cand["out_dtypes"])]
    for _ in range(args.times):
        fn(*inputs, *outputs)
    torch.cuda.synchronize()
    return 0


def _calibration(kind: str, manifest: dict, rows: list[dict]) -> str:
    """How the candidate ranking's current tie-break orders the measured tilings: Spearman's rho between
    its order and the measured times, and the measured time of the tiling it puts first."""
    from axon_eg.backends.triton.backend import TRITON
    from axon_eg.extract.cost import spearman
    from axon_eg.extract.tiling import Tiling, stored_tie_break

    timed = [r for r in rows if r.get("median_us") and r["id"] in manifest]
    if len(timed) < 3:
        return "(too few measured tilings to compare with the ranking)"
    keys = [(stored_tie_break(Tiling(0, tuple(manifest[r["id"]]["meta"]["tiling"].items())), TRITON.templates, kind),
             manifest[r["id"]]["meta"].get("isa") or "") for r in timed]
    order = sorted(range(len(timed)), key=lambda i: keys[i])
    rank = {i: pos for pos, i in enumerate(order)}
    rho = spearman([rank[i] for i in range(len(timed))], [r["median_us"] for r in timed])
    best = min(r["median_us"] for r in timed)
    return (f"current tie-break vs measured: Spearman {rho:+.2f}; its first tiling {timed[order[0]]['median_us']:.1f} us, "
            f"the fastest {best:.1f} us")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bundle", help="write one bundle of tilings per swept group")
    b.add_argument("dir")
    which = b.add_mutually_exclusive_group(required=True)
    which.add_argument("--program", help="a suite program")
    which.add_argument("--problem", help="a KernelBench-format file (benchmarks/problems/...)")
    b.add_argument("--group", type=int, help="the group to sweep (default: each group)")
    b.add_argument("--limit", type=int, default=16, help="tilings per group, best ranked first")
    b.add_argument("--where", help="Python filter over the tiling's keys, e.g. 'BLOCK_N >= 1024'")
    b.add_argument("--isa", choices=["best", "all"], default="best")
    b.add_argument("--hw", default="h200")
    b.add_argument("--small", action="store_true", help="the program's CI sizes (for a dry run here)")
    b.set_defaults(fn=cmd_bundle)
    x = sub.add_parser("run", help="run one kernel of a bundle (for ncu)")
    x.add_argument("bundle")
    x.add_argument("id")
    x.add_argument("--times", type=int, default=3)
    x.set_defaults(fn=cmd_run)
    r = sub.add_parser("report", help="print the measured tilings of every bundle under DIR")
    r.add_argument("dir")
    r.set_defaults(fn=cmd_report)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    raise SystemExit(main())
