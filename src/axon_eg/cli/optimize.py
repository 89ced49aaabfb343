"""``axon-eg optimize TARGET``: the whole pipeline from the command line.

TARGET is a suite program name, a KernelBench file (``class Model`` + ``get_inputs``) or a Python
file with one ``@ax.program``. The best kernel is written to ``OUT/best.py`` with the report
(``OUT/report.md``, Markdown, every cell in full) and the candidate table (``OUT/table.parquet``).

Sizes: without ``--full`` a suite program runs at its small sizes and a KernelBench file at its
``SMALL_SIZES`` (a file without them runs at its own sizes); ``--sizes NAME=INT,...`` sets dims (a
suite program's or ``@ax.program``'s) or module-level constants (a KernelBench file's) over those.
One line says which sizes are used and why. Then, when phase 2 runs here (not ``--bundle-only``, ``--rows``
or ``--ray``), its memory is estimated from the shapes (``validate.phase2_size``: inputs, parameters and
outputs with their float64 copies for the reference) and a run over 80% of the memory available, or under
the Triton interpreter (``--cpu``, or no GPU) over ``validate.INTERPRETER_ELEMS`` elements, is refused in one
line naming the program, its sizes, the bytes and the memory, before phase 1; ``--allow-large`` runs it.

Output: in a terminal, a progress bar per phase, then a table that fits the terminal (columns with no
value on this device left out, long cells cut with an ellipsis, the selected row highlighted); when
stdout is not a terminal (a pipe, a log file, CI), plain flushed lines as the phases advance instead
of the bars. Then one line on why the selected row won (ties included) and the output files; a run
whose best is a baseline says so in its last line.

Exit status: 0 when a kernel was selected; 2 on an error, including a run in which nothing ran
correctly (the table and report of what was measured are still written to OUT); 3 with
``--require-candidate`` when the best is a baseline (torch eager or torch.compile), not a candidate.

On a machine without a GPU the candidates are checked under the Triton interpreter (correctness
only). For a GPU box without the phase-1 dependencies (egglog, z3, polars), split the run:

    axon-eg optimize rmsnorm --full --bundle-only          # here: prints the bundle directory
    python -m axon_eg.measure BUNDLE --out rows.jsonl      # there: numpy, torch, triton only
    axon-eg optimize rmsnorm --full --rows rows.jsonl      # here: tables, selection, report
"""

from __future__ import annotations

import argparse
import ast
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from axon_eg import loading, validate
from axon_eg.buckets import describe
from axon_eg.errors import InvalidArgument, ProgramError
from axon_eg.hw import DEFAULT_HW
from axon_eg.hw import load as load_hw
from axon_eg.measure.report import baseline_line, failures, markdown_table, selection_line, terminal_table
from axon_eg.measure.report import report as plots_report
from axon_eg.measure.worker import _visible_gpus
from axon_eg.result import SUMMARY_COLUMNS, PipelineError
from axon_eg.targets import backend_for_hw
from axon_eg.validate import INTERPRETER_ELEMS, PRECISIONS

PHASES = ("saturate", "extract", "emit", "measure", "select")
EXIT_ERROR = 2
EXIT_BASELINE = 3
"""Exit status of a run whose best is a baseline, under ``--require-candidate``."""
PROGRESS_EVERY_S = 2.0
"""Plain progress (stdout not a terminal): at most one line per phase this often, besides its start and end."""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("optimize", help="saturate, extract, emit, check and time a program; write the best kernel",
                       description="Saturate, extract, emit, check and time a program; write the best kernel, the "
                                   "report and the candidate table.",
                       epilog="exit status: 0 a kernel was selected; 2 an error, or nothing ran correctly (the table "
                              f"and report are still written to --out); {EXIT_BASELINE} with --require-candidate, the "
                              "best is a baseline (torch eager or torch.compile)")
    p.add_argument("target", help="suite program name, KernelBench file, or .py file with one @ax.program")
    p.add_argument("--hw", default=DEFAULT_HW, help=f"hardware description in data/hw_costs (default {DEFAULT_HW}; trn1/trn2 "
                   "select the NKI target: simulator + Trainium engine model)")
    p.add_argument("-k", type=int, default=8, help="candidates to emit and measure (default 8)")
    p.add_argument("--budget", type=float, default=None, help="seconds for the whole run (default: no limit)")
    p.add_argument("--out", default=None, help="output directory (default ./axon_eg_out/<program>)")
    p.add_argument("--cache", default=None, help="cache directory (default $AXON_EG_CACHE or ~/.cache/axon_eg)")
    p.add_argument("--full", action="store_true", help="full sizes: a suite program's H200 sizes, a KernelBench "
                   "file's own (default: small sizes, the suite's or the file's SMALL_SIZES)")
    p.add_argument("--sizes", default=None, metavar="NAME=INT,...", help="set sizes over those: dims of a suite "
                   "program or @ax.program, module-level constants of a KernelBench file (e.g. batch_size=4)")
    p.add_argument("--buckets", default=None, metavar="NAME=SIZES", type=_buckets,
                   help="shape buckets: the sizes of a dim to tune at (M=1,16,128) or a range (M=1..16384, tuned at "
                   "its powers of two); the kernel serves every size from the smallest to the largest")
    p.add_argument("--cpu", action="store_true", help="ignore GPUs: Triton interpreter, correctness only")
    p.add_argument("--ray", default=None, metavar="ADDRESS", help="spread phase 2 over a Ray cluster ('local' starts one)")
    p.add_argument("--bundle-only", action="store_true", help="phase 1 only: write the bundle for a remote worker")
    p.add_argument("--rows", default=None, help="measurement rows (JSON lines) made by a remote worker on the bundle")
    p.add_argument("--force", action="store_true", help="measure again even on a cache hit")
    p.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="fp32 matmul precision: ieee (fp32 accuracy: fp32 FMAs, the library's fp32 GEMM or the "
                        "3xTF32 split on tensor cores), strict (no 3xTF32 split) or tf32 (TF32 tensor cores); "
                        "default: torch's torch.backends.cuda.matmul.allow_tf32 (off: ieee)")
    p.add_argument("--plot", action="store_true", help="also save predicted-vs-measured and latency plots")
    allow_large_option(p)
    p.add_argument("--require-candidate", action="store_true", help=f"exit with status {EXIT_BASELINE} when the best "
                   "kernel is a baseline (torch eager or torch.compile): no candidate was correct, or none faster")
    p.set_defaults(func=cmd_optimize)


def _check_args(args: argparse.Namespace) -> dict[str, int] | None:
    """Options checked before anything is loaded (``validate.optimize_arguments``: ``-k``, ``--budget``,
    ``--hw``, ``--rows``, ``--out``, ``--cache``, TARGET); returns the parsed ``--sizes``. Errors are one
    line naming the option (InvalidArgument, printed by ``cli.main``)."""

    validate.optimize_arguments(args)
    return validate.parse_sizes(args.sizes, "--sizes") if args.sizes is not None else None


def cmd_optimize(args: argparse.Namespace) -> int:
    from rich.console import Console

    from axon_eg import pipeline, selection  # lazy: both load polars; `axon-eg --help` must not

    t0 = time.monotonic()
    console = Console(highlight=False)
    sizes = _check_args(args)
    if console.is_terminal:
        with console.status(f"loading {args.target}"):
            target, why_sizes = _load_target(args, sizes)
    else:  # a log shows what the first seconds (imports, a KernelBench file's export) are spent on
        PlainProgress(console.file, t0).line(f"load: {args.target}")
        target, why_sizes = _load_target(args, sizes)
    program = target.program
    say(console, why_sizes)
    if not (args.bundle_only or args.rows or args.ray or args.allow_large):  # phase 2 here: will its tensors fit?
        _check_program_size(target, args)
    device = "cpu" if args.cpu else ("cuda" if args.rows else None)
    out = validate.output_dir(args.out or Path("axon_eg_out") / program.name, "--out")
    with progress_bar(console, t0) as (progress, finish):
        if args.bundle_only:
            bundle = pipeline.write_bundle_only(program, _target(args.hw), args.hw, args.k, cache_dir=args.cache,
                                                progress=progress, precision=args.precision)
            finish(("saturate", "extract", "emit"), "")
        else:
            try:
                result = pipeline.saturate_and_extract(program, _target(args.hw), args.hw, args.k, args.budget,
                                                       cache_dir=args.cache, device=device, ray_address=args.ray,
                                                       rows=args.rows, force=args.force, progress=progress,
                                                       precision=args.precision, sizes=args.buckets)
            except PipelineError as exc:
                table = _measured_table(exc, selection.VERDICTS)
                if table is None:
                    raise
                finish((), "")
                return _no_kernel(console, program, args, out, table, exc)
            finish(PHASES, "cached" if result.cache_hit else "")
    if args.bundle_only:
        say(console, f"bundle written in {time.monotonic() - t0:.1f} s: {bundle}\n"
                      f"run on the GPU box:  python -m axon_eg.measure {bundle} --out rows.jsonl\n"
                      f"then here:           axon-eg optimize {args.target}{' --full' if args.full else ''}"
                      f"{f' --sizes {args.sizes}' if args.sizes else ''} --rows rows.jsonl")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    if result.buckets:  # a bucketed run: each bucket's selection, and its table and summary line
        for ranges, res in result.buckets:
            tag = "_".join(f"{d}{lo}-{hi}" for d, (lo, hi) in sorted(ranges.items()))
            shutil.copyfile(res.best.path, out / f"best_{tag}.py")
            say(console, f"{describe(ranges)}: {selection_line(res.table, res.best.id, res.timed)}")
        result.table.write_parquet(out / "table.parquet")
        say(console, f"best kernels: {out}/best_*.py (one per bucket)  table: {out / 'table.parquet'}")
        return 0
    best = out / ("best_nki.py" if result.best.mode == "nki" else "best.py")
    shutil.copyfile(result.best.path, best)
    result.table.write_parquet(out / "table.parquet")
    chose = selection_line(result.table, result.best.id, result.timed)
    last = baseline_line(result.table, result.best.id)
    text = _report(program, result, args, [chose, *([last] if last else [])])
    if args.plot:
        text += "\n" + plots_report(args.cache, program=program.name, plot_dir=out)
    (out / "report.md").write_text(text)
    say(console, result.summary().split("\n\n", 1)[0])
    _print_table(console, result.table, result.best.id)
    say(console, chose)
    say(console, f"best kernel: {best}  report: {out / 'report.md'}  table: {out / 'table.parquet'}")
    if last is None:
        return 0
    if args.require_candidate:
        say(console, f"{last} (exit status {EXIT_BASELINE}: --require-candidate)")
        return EXIT_BASELINE
    say(console, last)
    return 0


# -- sizes ----------------------------------------------------------------------------------------
def _buckets(text: str) -> dict[str, Any]:

    try:
        return validate.buckets_arg(text)
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--buckets {text!r}: ")) from None


def _load(args: argparse.Namespace, sizes: dict[str, int] | None) -> tuple[Any, str]:
    """The program at the sizes the options ask for (``loading.resolve_target``), and the line saying which and why."""
    target, line = _load_target(args, sizes)
    return target.program, line


def check_size_names(path: str | Path, sizes: dict[str, int] | None, text: str | None) -> None:
    """``--sizes`` (parsed ``sizes``, as typed ``text``) names only module-level names of the KernelBench-format
    file ``path``, read without running it; InvalidArgument naming the first that is not, and the file's
    integer constants. ``optimize`` and ``optimize-triton`` both check it before the (slow) import."""
    if not sizes:
        return
    defined, ints = _module_constants(Path(path))
    unknown = [n for n in sizes if n not in defined]
    if unknown:
        raise InvalidArgument(f"--sizes {text!r}: {Path(path).name} has no module-level "
                              f"{unknown[0]!r} (its integer constants: {', '.join(ints) or 'none'})")


def _load_target(args: argparse.Namespace, sizes: dict[str, int] | None) -> tuple[Any, str]:
    """``loading.resolve_target`` at the sizes the options ask for, and the line saying which and why."""
    small = not args.full
    kind = validate.target_kind(args.target)
    if kind == "kernelbench":  # a name the file does not define, before the (slow) import
        check_size_names(args.target, sizes, args.sizes)
    try:
        target = loading.resolve_target(args.target, small=small, sizes=sizes)
    except ProgramError as e:
        if sizes and kind != "kernelbench":  # binding the dims to --sizes broke the program
            raise InvalidArgument(f"--sizes {args.sizes!r}: {e}") from None
        raise
    if kind == "kernelbench" and small:
        return target, f"{'--cpu without --full' if args.cpu else 'without --full'}: {target.note}"
    return target, f"sizes: {target.note}"


def allow_large_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-large", action="store_true", help="run even when the inputs and outputs (with the float64 "
                   "reference) need more than 80%% of the memory available, or, under the Triton interpreter (--cpu, or "
                   f"no GPU), hold more than {INTERPRETER_ELEMS:,} elements (default: refuse, naming the sizes)")


def interpreter_reason(cpu: bool) -> str | None:
    """Why phase 2 runs under the Triton interpreter here ("--cpu", "no GPU here"), or None on a GPU."""
    if cpu:
        return "--cpu"
    return None if _visible_gpus() else "no GPU here"


def _check_program_size(target: Any, args: argparse.Namespace) -> None:
    """``validate.phase2_size`` for a program: its inputs (parameters included) and outputs from its shapes."""
    import math


    program = target.program
    shapes = [(s, program.concrete_shape(n)) for s, n in zip(program.inputs, program.input_ids)]
    inputs = [(math.prod(shape), s.dtype.itemsize) for s, shape in shapes]
    outputs = [(math.prod(program.concrete_shape(o)), program.nodes[o].dtype.itemsize) for o in program.outputs]
    roles = dict(getattr(program, "roles", {}) or {})
    user = [f"{s.name} {list(shape)} {s.dtype}" for s, shape in shapes if s.name not in roles]
    at = ", ".join(f"{k}={v}" for k, v in target.sizes.items()) or "its own sizes"
    if target.kind == "kernelbench":
        smaller = "--sizes NAME=INT,... over its module constants" + ("" if not args.full else ", or drop --full")
    else:
        smaller = "--sizes NAME=INT,..." + (", or drop --full" if args.full else "")
    validate.phase2_size(f"{program.name} at {at} (inputs {', '.join(user[:4])}{', ...' if len(user) > 4 else ''})",
                         inputs, outputs, interpreter=interpreter_reason(args.cpu), smaller=smaller)


def _module_constants(path: Path) -> tuple[set[str], list[str]]:
    """(every name a file assigns at module level, those assigned an int literal), read without running it."""
    defined: set[str] = set()
    ints: list[str] = []
    for node in ast.parse(path.read_bytes()).body:
        if not isinstance(node, ast.Assign):
            continue
        for t in node.targets:  # ``n = 4`` and ``rows, cols = 4, 8``
            pairs = zip(t.elts, node.value.elts) if isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple) \
                and len(t.elts) == len(node.value.elts) else [(t, node.value)]
            for target, value in pairs:
                names = [e.id for e in (target.elts if isinstance(target, ast.Tuple) else [target]) if isinstance(e, ast.Name)]
                defined.update(names)
                if isinstance(value, ast.Constant) and type(value.value) is int:
                    ints += names
    return defined, ints


# -- progress -------------------------------------------------------------------------------------
class PlainProgress:
    """Progress as plain lines (``[12.3 s] saturate: 41 e-nodes``), flushed as they are written: each phase's
    first and last report, and in between at most one line per ``every`` seconds."""

    def __init__(self, file: IO[str], t0: float, every: float = PROGRESS_EVERY_S):
        self.file, self.t0, self.every = file, t0, every
        self.started: dict[str, float] = {}
        self.last: dict[str, float] = {}
        self.ended: set[str] = set()

    def __call__(self, phase: str, done: int, total: int, detail: str) -> None:
        now = time.monotonic()
        first = phase not in self.started
        end = done >= total
        if first:
            self.started[phase] = now
        elif not end and now - self.last[phase] < self.every:
            return
        if end and phase in self.ended:
            return
        self.last[phase] = now
        if end:
            self.ended.add(phase)
            took = f" ({now - self.started[phase]:.1f} s)" if not first else ""
            text = f"{phase} {done}/{total} done{took}" + (f": {detail}" if detail else "")
        elif phase == "measure" and detail:  # reported as each one starts
            text = f"{phase} {done + 1}/{total} {detail}"
        else:
            text = f"{phase} {done}/{total}" + (f": {detail}" if detail else "")
        self.line(text, now)

    def line(self, text: str, now: float | None = None) -> None:
        self.file.write(f"[{(time.monotonic() if now is None else now) - self.t0:.1f} s] {text}\n")
        self.file.flush()


Finish = Callable[[tuple[str, ...], str], None]


@contextmanager
def progress_bar(console: Any, t0: float, phases: tuple[str, ...] = PHASES,
              ) -> Iterator[tuple[Callable[[str, int, int, str], None], Finish]]:
    """(progress callback, finish(phases, detail)): rich bars in a terminal (one per phase of ``phases``),
    ``PlainProgress`` lines otherwise. ``finish`` shows the named phases that reported nothing (a cache hit
    skips them) as done."""
    if not console.is_terminal:
        plain = PlainProgress(console.file, t0)

        def finish_plain(phases: tuple[str, ...], detail: str) -> None:
            skipped = [ph for ph in phases if ph not in plain.started]
            if skipped:
                plain.line(f"{', '.join(skipped)}: skipped" + (f" ({detail})" if detail else ""))

        yield plain, finish_plain
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description:<9}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[detail]}"))
    with Progress(*columns, console=console, transient=False) as bar:
        tasks = {ph: bar.add_task(ph, total=None, detail="") for ph in phases}

        def progress(phase: str, done: int, total: int, detail: str) -> None:
            bar.update(tasks[phase], completed=done, total=max(total, 1), detail=detail[:60])

        def finish(phases: tuple[str, ...], detail: str) -> None:
            for ph in phases:
                if bar.tasks[tasks[ph]].total is None:
                    bar.update(tasks[ph], total=1, completed=1, detail=detail)

        yield progress, finish


# -- output ---------------------------------------------------------------------------------------
def say(console: Any, text: str) -> None:
    """A plain line (no markup, never hard-wrapped: paths stay whole)."""
    console.print(text, markup=False, soft_wrap=True)


def _columns(table: Any) -> list[str]:
    return [c for c in (*SUMMARY_COLUMNS, "error") if c in table.columns]


def _print_table(console: Any, table: Any, selected: str | None) -> None:
    console.print(terminal_table(table, _columns(table), selected, console.width))


def _target(hw_name: str) -> str:
    return backend_for_hw(load_hw(hw_name)).name


def _measured_table(exc: Exception, verdicts: dict[str, str]) -> Any:
    """What this run measured before ``exc`` (nothing ran correctly), or None when it measured nothing:
    the pipeline's PipelineError carries the run's table as ``table``; a status's verdict is ``verdicts``'s
    (``selection.VERDICTS``) where the table has none."""
    import polars as pl

    table = getattr(exc, "table", None)
    if table is None:
        return None
    if table.is_empty():
        return None
    if "verdict" not in table.columns:
        table = table.with_columns(verdict=pl.col("status").replace(verdicts).fill_null("not measured"))
    return table


def _no_kernel(console: Any, program: Any, args: argparse.Namespace, out: Path, table: Any, exc: Exception) -> int:
    """Nothing ran correctly: write the table and report of what was measured, show the table, one error line."""
    import sys

    out.mkdir(parents=True, exist_ok=True)
    table.write_parquet(out / "table.parquet")
    n_bad, n, counts = failures(table)
    why = f"no kernel: {n_bad} of {n} candidates failed ({counts}) and no baseline ran correctly"
    (out / "report.md").write_text(_report(program, None, args, [why, f"error: {exc}"], table))
    _print_table(console, table, None)
    print(f"axon-eg: error: {exc}; what was measured: {out / 'report.md'}, {out / 'table.parquet'}", file=sys.stderr)
    return EXIT_ERROR


def _report(program: Any, result: Any, args: argparse.Namespace, lines: list[str], table: Any = None) -> str:
    """``report.md``: the run, the selection lines, and the table in Markdown with every cell in full."""
    table = result.table if result is not None else table
    head = [f"# axon_eg optimize {args.target}", "",
            f"- program: {program.name} ({program.hash[:12]}), inputs "
            + ", ".join(f"{s.name} {list(program.concrete_shape(n))} {s.dtype}"
                        for s, n in zip(program.inputs, program.input_ids))]
    if result is not None:
        head += [f"- hardware: {args.hw}; device: " + ("NKI simulator + Trainium engine model" if result.best.mode == "nki"
                                                       else "GPU, timed" if result.timed
                                                       else "CPU interpreter, correctness only"),
                 f"- best: `{result.best.id}` ({result.best.kind})",
                 f"- phase 1 (saturate, extract, emit): {result.phase1_s:.2f} s; phase 2 (compile, check, time): "
                 f"{result.phase2_s:.2f} s" + ("; rows imported from a remote worker" if args.rows else ""),
                 f"- cache: {'hit' if result.cache_hit else 'miss'} (key {result.cache_key})"]
    else:
        head += [f"- hardware: {args.hw}", "- best: none"]
    head += [*(f"- {line}" for line in lines), ""]
    return "\n".join([*head, markdown_table(table.select(_columns(table)))]) + "\n"
