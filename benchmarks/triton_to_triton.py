"""Triton to Triton on the corpus (issue 22): each input against the fastest correct file the stages find.

    python benchmarks/triton_to_triton.py build DIR [--small] [--files ...]   # here: triton_in.prepare per input
    python benchmarks/triton_to_triton.py measure DIR                           # GPU box: the worker, every bundle
    python benchmarks/triton_to_triton.py combine DIR                           # here (or on the GPU box after
                                                                                # python -m pip install libcst):
                                                                                # the stages' winners on one file
    python benchmarks/triton_to_triton.py measure DIR                           # GPU box: the combined files only
    python benchmarks/triton_to_triton.py report DIR                            # here: triton_in.finish, the table

The inputs are ``benchmarks/triton_inputs`` (``*_kb.py``: KernelBench form; ``*_t2t.py`` with ``*_ref.py`` and
``*.yaml``: the Triton-to-Triton form); ``--small`` takes each file's small sizes (``SMALL_SIZES``, the YAML's
``small``), for a run under the interpreter. Each input's bundle holds the input file itself (the
baseline every stage must beat), each stage's candidates and axon_eg's own kernels for the reference
(``nugraph``); the worker checks each against the float64 reference and times it (L2 flushed, steady-batch
medians). ``report`` prints per input the input's time, the best file's, the speedup and which stage won.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
CORPUS = ROOT / "benchmarks" / "triton_inputs"


def inputs(names: list[str] | None) -> list[tuple[str, Path, Path | None, Path | None]]:
    """(name, file, reference, spec) of every corpus input (or those named)."""
    out = []
    for path in sorted(CORPUS.glob("*_kb.py")) + sorted(CORPUS.glob("*_t2t.py")):
        name = path.stem
        if names and name not in names:
            continue
        if name.endswith("_t2t"):
            stem = name.removesuffix("_t2t")
            out.append((name, path, CORPUS / f"{stem}_ref.py", CORPUS / f"{stem}.yaml"))
        else:
            out.append((name, path, None, None))
    return out


def _small_kb(path: Path, out: Path) -> Path:
    """A copy of a KernelBench-form input with its module constants set to ``SMALL_SIZES``."""
    import ast

    text = path.read_text()
    small = next(ast.literal_eval(n.value) for n in ast.parse(text).body
                 if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "SMALL_SIZES" for t in n.targets))
    copy = out / path.name
    copy.write_text(text + "\n\n# --small: the sizes for the interpreter\n" + "".join(f"{k} = {v!r}\n" for k, v in small.items()))
    return copy


def cmd_build(args: argparse.Namespace) -> int:
    import yaml

    from axon_eg.triton_in import prepare, tiles

    tiles.TILE_POINTS = args.tile_points
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    plan = {}
    for name, path, ref, spec in inputs(args.files):
        target = out / name
        target.mkdir(exist_ok=True)
        spec_arg = None
        if spec is not None:
            data = yaml.safe_load(spec.read_text())
            spec_arg = data["small"] if args.small else {"inputs": data["inputs"], "init": data.get("init", [])}
        elif args.small:
            path = _small_kb(path, target)
        try:
            prepare(path, reference=ref, spec=spec_arg, hw=args.hw, out=target, nugraph_k=args.k)
            plan[name] = {"dir": name}
            print(f"{name}: bundle {target / 'bundle'}", flush=True)
        except Exception as exc:  # noqa: BLE001 - one input that fails is a line, the others go on
            plan[name] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"{name}: {plan[name]['error']}", flush=True)
    (out / "plan.json").write_text(json.dumps(plan, indent=1))
    return 0


def cmd_measure(args: argparse.Namespace) -> int:
    from axon_eg.measure.cli import main as worker

    out = Path(args.dir)
    plan = json.loads((out / "plan.json").read_text())
    bundles = [str(out / v["dir"] / "bundle") for v in plan.values() if "dir" in v]
    return worker(bundles + (["--cpu"] if args.cpu else []))


def cmd_combine(args: argparse.Namespace) -> int:
    from axon_eg.triton_in import combine

    out = Path(args.dir)
    plan = json.loads((out / "plan.json").read_text())
    for name, info in plan.items():
        if "dir" in info:
            print(f"{name}: {'a combined file to measure' if combine(out / info['dir']) else 'nothing to combine'}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from axon_eg.triton_in import finish

    out = Path(args.dir)
    plan = json.loads((out / "plan.json").read_text())
    lines = ["| input | input us | best us | speedup | best | stage | candidates ok / all |", "|---|---:|---:|---:|---|---|---:|"]
    table = []
    for name, info in plan.items():
        if "dir" not in info:
            lines.append(f"| {name} | - | - | - | - | {info['error'][:60]} | - |")
            continue
        try:
            result = finish(out / info["dir"])
        except Exception as exc:  # noqa: BLE001 - not measured yet: say so
            lines.append(f"| {name} | - | - | - | - | {type(exc).__name__}: {str(exc)[:60]} | - |")
            continue
        by_id = {r["id"]: r for r in result.rows}
        base, best = by_id.get("input", {}), by_id.get(result.best, {})
        speed = base.get("median_us") / best["median_us"] if base.get("median_us") and best.get("median_us") else None
        ok = sum(r["status"] == "ok" for r in result.rows)
        lines.append(f"| {name} | {_us(base.get('median_us'))} | {_us(best.get('median_us'))} | "
                     f"{'-' if speed is None else f'{speed:.2f}'} | {result.best} | {best.get('transform')} | "
                     f"{ok} / {len(result.rows)} |")
        table.append({"input": name, "input_us": base.get("median_us"), "best_us": best.get("median_us"),
                      "best": result.best, "stage": best.get("transform"), "speedup": speed})
    (out / "report.json").write_text(json.dumps(table, indent=1))
    print("\n".join(lines))
    return 0


def _us(v: float | None) -> str:
    return "-" if not v else f"{v:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("dir")
    b.add_argument("--small", action="store_true", help="each input's small sizes (a run under the interpreter)")
    b.add_argument("--files", nargs="*", help="input names (default: the whole corpus)")
    b.add_argument("--hw", default="h200")
    b.add_argument("--k", type=int, default=4, help="axon_eg's own kernels per input (the nugraph stage)")
    b.add_argument("--tile-points", type=int, default=8, help="tile-size candidates per kernel (tiles.TILE_POINTS)")
    m = sub.add_parser("measure")
    m.add_argument("dir")
    m.add_argument("--cpu", action="store_true")
    sub.add_parser("combine").add_argument("dir")
    sub.add_parser("report").add_argument("dir")
    args = ap.parse_args(argv)
    return {"build": cmd_build, "measure": cmd_measure, "combine": cmd_combine, "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
