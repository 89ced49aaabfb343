"""``axon-eg optimize TARGET``: the whole pipeline from the command line, with a progress bar per phase.

TARGET is a suite program name, a KernelBench file (``class Model`` + ``get_inputs``) or a Python
file with one ``@ax.program``. The best kernel is written to ``OUT/best.py`` with the report
(``OUT/report.md``) and the candidate table (``OUT/table.parquet``).

On a machine without a GPU the candidates are checked under the Triton interpreter (correctness
only). For a GPU box without the phase-1 dependencies (egglog, z3, polars), split the run:

    axon-eg optimize rmsnorm --full --bundle-only          # here: prints the bundle directory
    python -m axon_eg.measure BUNDLE --out rows.jsonl      # there: numpy, torch, triton only
    axon-eg optimize rmsnorm --full --rows rows.jsonl      # here: tables, selection, report
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path
from typing import Any

PHASES = ("saturate", "extract", "emit", "measure", "select")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("optimize", help="saturate, extract, emit, check and time a program; write the best kernel")
    p.add_argument("target", help="suite program name, KernelBench file, or .py file with one @ax.program")
    p.add_argument("--hw", default="h200", help="hardware description in data/hw_costs (default h200; trn1/trn2 "
                   "select the NKI target: simulator + Trainium engine model)")
    p.add_argument("-k", type=int, default=8, help="candidates to emit and measure (default 8)")
    p.add_argument("--budget", type=float, default=None, help="seconds for the whole run (default: no limit)")
    p.add_argument("--out", default=None, help="output directory (default ./axon_eg_out/<program>)")
    p.add_argument("--cache", default=None, help="cache directory (default $AXON_EG_CACHE or ~/.cache/axon_eg)")
    p.add_argument("--full", action="store_true", help="suite programs: H200 sizes (default: small sizes)")
    p.add_argument("--cpu", action="store_true", help="ignore GPUs: Triton interpreter, correctness only")
    p.add_argument("--ray", default=None, metavar="ADDRESS", help="spread phase 2 over a Ray cluster ('local' starts one)")
    p.add_argument("--bundle-only", action="store_true", help="phase 1 only: write the bundle for a remote worker")
    p.add_argument("--rows", default=None, help="measurement rows (JSON lines) made by a remote worker on the bundle")
    p.add_argument("--force", action="store_true", help="measure again even on a cache hit")
    p.add_argument("--plot", action="store_true", help="also save predicted-vs-measured and latency plots")
    p.set_defaults(func=cmd_optimize)


def cmd_optimize(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from axon_eg.cli import load_target
    from axon_eg.pipeline import saturate_and_extract, write_bundle_only

    console = Console(highlight=False)
    program, _ = load_target(args.target, small=not args.full)
    device = "cpu" if args.cpu else ("cuda" if args.rows else None)
    out = Path(args.out or Path("axon_eg_out") / program.name)
    columns = (TextColumn("{task.description:<9}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[detail]}"))
    with Progress(*columns, console=console, transient=False) as bar:
        tasks = {ph: bar.add_task(ph, total=None, detail="") for ph in PHASES}

        def progress(phase: str, done: int, total: int, detail: str) -> None:
            bar.update(tasks[phase], completed=done, total=max(total, 1), detail=detail[:60])

        t0 = time.monotonic()
        if args.bundle_only:
            bundle = write_bundle_only(program, _target(args.hw), args.hw, args.k, cache_dir=args.cache, progress=progress)
            for ph in ("saturate", "extract", "emit"):
                bar.update(tasks[ph], total=1, completed=1)
        else:
            result = saturate_and_extract(program, _target(args.hw), args.hw, args.k, args.budget, cache_dir=args.cache,
                                          device=device, ray_address=args.ray, rows=args.rows, force=args.force,
                                          progress=progress)
            for ph in PHASES:  # a cache hit skips phases; show them as done
                if bar.tasks[tasks[ph]].total is None:
                    bar.update(tasks[ph], total=1, completed=1, detail="cached" if result.cache_hit else "")
    if args.bundle_only:
        console.print(f"bundle written in {time.monotonic() - t0:.1f} s: {bundle}\n"
                      f"run on the GPU box:  python -m axon_eg.measure {bundle} --out rows.jsonl\n"
                      f"then here:           axon-eg optimize {args.target}{' --full' if args.full else ''} "
                      f"--rows rows.jsonl")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(result.best.path, out / ("best_nki.py" if result.best.mode == "nki" else "best.py"))
    result.table.write_parquet(out / "table.parquet")
    text = _report(program, result, args)
    if args.plot:
        from axon_eg.measure.report import report

        text += "\n" + report(args.cache, program=program.name, plot_dir=out)
    (out / "report.md").write_text(text)
    console.print(result.summary())
    best = out / ("best_nki.py" if result.best.mode == "nki" else "best.py")
    console.print(f"best kernel: {best}  report: {out / 'report.md'}  table: {out / 'table.parquet'}")
    return 0


def _target(hw_name: str) -> str:
    from axon_eg.hw import load

    return "nki" if load(hw_name).kind == "trainium" else "triton"


def _report(program: Any, result: Any, args: argparse.Namespace) -> str:
    from axon_eg.pipeline import SUMMARY_COLUMNS, markdown

    cols = [c for c in (*SUMMARY_COLUMNS, "error") if c in result.table.columns]
    lines = [f"# axon_eg optimize {args.target}", "",
             f"- program: {program.name} ({program.hash[:12]}), inputs "
             + ", ".join(f"{s.name} {list(program.concrete_shape(n))} {s.dtype}"
                         for s, n in zip(program.inputs, program.input_ids)),
             f"- hardware: {args.hw}; device: " + ("NKI simulator + Trainium engine model" if result.best.mode == "nki"
                                                   else "GPU, timed" if result.timed else "CPU interpreter, correctness only"),
             f"- best: `{result.best.id}` ({result.best.kind})",
             f"- phase 1 (saturate, extract, emit): {result.phase1_s:.2f} s; phase 2 (compile, check, time): "
             f"{result.phase2_s:.2f} s" + ("; rows imported from a remote worker" if args.rows else ""),
             f"- cache: {'hit' if result.cache_hit else 'miss'} (key {result.cache_key})", "",
             markdown(result.table.select(cols))]
    return "\n".join(lines) + "\n"
