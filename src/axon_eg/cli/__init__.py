"""The ``axon-eg`` command line. Only subcommands that work are listed.

    axon-eg ops                      the operator registry
    axon-eg suite                    the benchmark suite programs
    axon-eg inspect TARGET           print a program and run its float64 reference
    axon-eg show TARGET              the program's νGraph: e-classes, members, SVG
    axon-eg optimize TARGET          the whole pipeline: best kernel, report, table (see cli/optimize.py)
    axon-eg optimize-triton FILE     an existing Triton program: stages, cascade, the fastest correct file
    axon-eg rules discover|verify|list   the Z3-proven rewrite rules
    axon-eg cache ls|rm              the cached runs: list them, remove some or all (see cli/cache.py)

TARGET is a suite program name, a KernelBench file (a file defining ``Model``, ``get_inputs`` or
``get_init_inputs``; it runs at its ``SMALL_SIZES`` unless ``--full``) or a .py file with one
``@ax.program``. Errors a user can fix are one line, ``axon-eg: error: <message>``, exit status 2.
``axon-eg --version`` prints the version; ``axon-eg optimize-triton --help`` its sizes and exit codes.
What a TARGET names and how it is loaded is :mod:`axon_eg.loading`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from axon_eg import __version__, validate
from axon_eg.cli import optimize as optimize_cli
from axon_eg.egraph.views import members, to_text
from axon_eg.errors import AxonError, InvalidArgument
from axon_eg.hw import DEFAULT_HW
from axon_eg.ir import ops as O
from axon_eg.ir.inputs import random_inputs
from axon_eg.ir.interpret import interpret
from axon_eg.loading import load_suite, load_target, resolve_target
from axon_eg.measure.interrupts import OneLineInterrupt


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False)


# ------------------------------------------------------------------------------------------------
def cmd_ops(args: argparse.Namespace) -> int:
    from rich.table import Table

    table = Table(title=f"{len(O.REGISTRY)} registered ops")
    for col in ("op", "kind", "inputs", "attributes", "meaning"):
        table.add_column(col)
    for op in O.all_ops():
        if args.kind and op.kind.value != args.kind:
            continue
        attrs = ", ".join(a.name if a.required else f"{a.name}={a.default!r}" for a in op.attrs)
        table.add_row(op.name, op.kind.value, ", ".join(op.inputs), attrs, op.doc)
    _console().print(table)
    return 0


def cmd_suite(args: argparse.Namespace) -> int:
    from rich.table import Table

    suite = load_suite()
    table = Table(title=f"benchmark suite: {len(suite.SUITE)} programs")
    for col in ("name", "kind", "ops", "H200 sizes", "description"):
        table.add_column(col)
    for e in suite.SUITE:
        sizes = " ".join(f"{k}={v}" for k, v in sorted(e.sizes.items()))
        table.add_row(e.name, e.kind, str(sum(1 for n in e.program.nodes if not O.is_source(n.op))),
                      sizes, e.description)
    _console().print(table)
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    import numpy as np

    console = _console()
    target = resolve_target(args.target, small=not args.full, sizes=args.sizes)
    program, fixed = target.program, target.inputs
    if args.expand:
        program = program.expand()
    if args.json:
        print(program.to_json())
        return 0
    console.print(str(program), markup=False, soft_wrap=True)
    console.print(f"hash {program.hash}; sizes: {target.note}", markup=False, soft_wrap=True)
    inputs = fixed if fixed is not None else random_inputs(program, seed=args.seed)
    start = time.perf_counter()
    outputs = interpret(program, inputs)
    seconds = time.perf_counter() - start
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    for i, out in enumerate(outputs):
        finite = np.isfinite(out)
        console.print(
            f"output {i}: shape {list(out.shape)}  mean {np.mean(out[finite]) if finite.any() else float('nan'):.6g}"
            f"  std {np.std(out[finite]) if finite.any() else float('nan'):.6g}  non-finite {int((~finite).sum())}"
        )
    console.print(f"float64 reference ran in {seconds * 1e3:.1f} ms")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from rich.table import Table

    from axon_eg.egraph.nugraph import Limits, NuGraph  # lazy: loads egglog; `axon-eg --help` must not

    console = _console()
    program, _ = load_target(args.target, small=not args.full, sizes=args.sizes)
    rules = []
    if args.rules == "discovered":
        from axon_eg.rules_discovered.store import load_rules  # lazy: loads z3 (a stored rule may need re-proving)

        rules = load_rules()
    graph = NuGraph(program, rules)
    if rules:
        report = graph.saturate(Limits(iterations=args.iterations, seconds=args.seconds))
        console.print(f"saturation: {report}", markup=False, soft_wrap=True)
    if args.eclass:
        console.print("\n".join(members(graph, args.eclass)), markup=False)
        return 0
    if args.text:
        console.print(to_text(graph), markup=False)
        return 0
    rows = graph.eclasses()
    table = Table(title=f"νGraph of {program.name}: {sum(r.size for r in rows)} e-nodes, {len(rows)} e-classes")
    for col in ("e-class", "shape", "dtype", "e-nodes", "cost", "cheapest member"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(r.id, str(list(r.shape)), r.dtype, str(r.size), str(r.cost), r.cheapest)
    console.print(table)
    if args.svg:
        svg = graph.render()
        if not svg.startswith("<"):
            console.print("graphviz 'dot' is not installed: no SVG written (use --text)")
            return 1
        Path(args.svg).write_text(svg)
        console.print(f"wrote {args.svg}")
    return 0


def cmd_rules_discover(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from axon_eg.rules_discovered.driver import discover  # lazy: loads z3

    console = _console()
    tasks: dict[str, object] = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as bar:
        def progress(label: str, done: int, total: int) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(f"proving {label}", total=total)
            bar.update(tasks[label], completed=done)

        summary, admitted, rejected = discover(timeout_ms=args.timeout_ms, jobs=args.jobs,
                                               write_store=not args.dry_run, progress=progress)
    _print_summary(console, summary)
    unsafe = sum(1 for e in admitted if not (e["float_safe"]["forward"] and e["float_safe"]["backward"]))
    console.print(f"{len(admitted)} rules admitted ({unsafe} with a float-unsafe direction), "
                  f"{len(rejected)} candidates rejected" + ("" if args.dry_run else "; store written"))
    return 0


def _print_summary(console: Any, summary: Any) -> None:
    import statistics

    from rich.table import Table

    table = Table(title="rule discovery")
    for col in ("family", "candidates", "proven", "refuted", "unknown"):
        table.add_column(col, justify="right" if col != "family" else "left")
    for fam, row in sorted(summary.by_family.items()):
        table.add_row(fam, *(str(row[k]) for k in ("candidates", "proven", "refuted", "unknown")))
    table.add_row("total", str(summary.candidates), str(summary.proven), str(summary.refuted), str(summary.unknown))
    console.print(table)
    times = sorted(summary.proof_seconds) or [0.0]
    p95 = times[min(len(times) - 1, int(0.95 * len(times)))]
    console.print(f"total {summary.seconds:.1f} s; per candidate median {statistics.median(times) * 1e3:.1f} ms, "
                  f"p95 {p95 * 1e3:.1f} ms, max {times[-1] * 1e3:.0f} ms")


def cmd_rules_verify(args: argparse.Namespace) -> int:
    from axon_eg.rules_discovered.verify import verify  # lazy: loads z3

    console = _console()
    report = verify(jobs=args.jobs, timeout_ms=args.timeout_ms)
    failures = report.failures
    for name, why in failures:
        console.print(f"[red]FAILED[/red] {name}: {why}", markup=True, highlight=False)
    console.print(f"re-proved {report.total - len({n for n, _ in failures})} of {report.total} stored rules from their "
                  f"text in {report.seconds:.1f} s (proofs {report.proof_seconds:.1f} s, float-safety verdicts "
                  f"{report.safety_seconds:.1f} s)")
    from axon_eg.backends.nki.synthesis import verify as verify_lowerings  # lazy: loads z3

    isa_failures, isa_total, isa_seconds = verify_lowerings(timeout_ms=args.timeout_ms)
    for name, why in isa_failures:
        console.print(f"[red]FAILED[/red] NKI lowering {name}: {why}")
    console.print(f"re-proved {isa_total - len(isa_failures)} of {isa_total} NKI lowerings and instruction fusions "
                  f"in {isa_seconds:.1f} s")
    return 1 if failures or isa_failures else 0


def cmd_rules_list(args: argparse.Namespace) -> int:
    from axon_eg.rules_discovered.store import load_stored  # lazy: loads z3 (a stored rule may need re-proving)

    console = _console()
    for stored in load_stored():
        e = stored.entry
        if args.family and e["family"] != args.family:
            continue
        safe = "".join(("→" if e["float_safe"]["forward"] else "·", "←" if e["float_safe"]["backward"] else "·"))
        cond = f"   if {' '.join(e['conditions'])}" if e["conditions"] and args.conditions else ""
        console.print(f"{e['name']:40s} {safe} {e['lhs']}  =>  {e['rhs']}{cond}", markup=False, soft_wrap=True)
    return 0


def _size_options(p: argparse.ArgumentParser, triton: bool = False) -> None:
    if triton:
        p.add_argument("--full", action="store_true", help="full sizes: a KernelBench file's own, a spec's inputs "
                       "(default: small sizes, the file's SMALL_SIZES or the spec's small: section)")
        p.add_argument("--sizes", type=_triton_sizes_type, default=None, metavar="NAME=INT,... | SET",
                       help="set module-level constants of the KernelBench-format file (FILE, or REF) over those "
                            "(e.g. ROWS=64); with an Xe-Forge spec, the size set: a section (ci, bench-gpu: its "
                            "largest set), SECTION[i], or a set's name (default: the smallest, the largest with --full)")
        return
    p.add_argument("--full", action="store_true", help="full sizes: a suite program's H200 sizes, a KernelBench "
                   "file's own (default: small sizes, the suite's or the file's SMALL_SIZES)")
    p.add_argument("--sizes", type=_sizes_type, default=None, metavar="NAME=INT,...",
                   help="set sizes over those: dims of a suite program or @ax.program, module-level constants of "
                        "a KernelBench file (e.g. batch_size=4)")


def _triton_sizes_type(text: str) -> dict[str, int] | str:
    """``NAME=INT,...`` (module constants), or a size set of an Xe-Forge spec (a word without ``=``)."""
    return text.strip() if text.strip() and "=" not in text else _sizes_type(text)


def _sizes_type(text: str) -> dict[str, int]:
    try:
        return validate.parse_sizes(text, "--sizes")
    except AxonError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="axon-eg", description="axon_eg: a superoptimizer for tensor programs")
    parser.add_argument("--version", action="version", version=f"axon-eg {_version()}",
                        help="print the version of axon_eg and exit")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("ops", help="list the operator registry")
    p.add_argument("--kind", help="only ops of this kind (elementwise, reduce, layout, composite, ...)")
    p.set_defaults(func=cmd_ops)

    p = sub.add_parser("suite", help="list the benchmark suite programs")
    p.set_defaults(func=cmd_suite)

    p = sub.add_parser("inspect", help="print a program and run its float64 reference on random inputs")
    p.add_argument("target", help="suite program name, KernelBench file, or .py file with one @ax.program")
    _size_options(p)
    p.add_argument("--expand", action="store_true", help="expand composite ops into primitives")
    p.add_argument("--json", action="store_true", help="print the program as JSON and exit")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("show", help="build the νGraph of a program and print its e-classes")
    p.add_argument("target", help="suite program name, KernelBench file, or .py file with one @ax.program")
    _size_options(p)
    p.add_argument("--rules", choices=["discovered", "none"], default="discovered",
                   help="saturate with the discovered rules (default) or not at all")
    p.add_argument("--iterations", type=int, default=30)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--eclass", help="list the members of one e-class")
    p.add_argument("--text", action="store_true", help="print every e-class with its e-nodes")
    p.add_argument("--svg", help="write the e-graph as SVG (needs graphviz)")
    p.set_defaults(func=cmd_show)

    optimize_cli.add_parser(sub)
    add_optimize_triton(sub)
    add_cache(sub)

    rules = sub.add_parser("rules", help="discover, verify and list the Z3-proven rewrite rules")
    rsub = rules.add_subparsers(dest="rules_command", required=True)
    p = rsub.add_parser("discover", help="enumerate candidates by operator propagation, prove them, write the store")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--timeout-ms", type=int, default=2000, help="Z3 timeout per query")
    p.add_argument("--dry-run", action="store_true", help="do not write the store")
    p.set_defaults(func=cmd_rules_discover)
    p = rsub.add_parser("verify", help="re-prove every stored rule (CI runs this)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--timeout-ms", type=int, default=4000)
    p.set_defaults(func=cmd_rules_verify)
    p = rsub.add_parser("list", help="print the admitted rules (→/← mark the float-safe directions)")
    p.add_argument("--family")
    p.add_argument("--conditions", action="store_true")
    p.set_defaults(func=cmd_rules_list)
    return parser


def add_cache(sub: Any) -> None:
    """Register ``axon-eg cache`` (``ls``, ``rm``; run by :mod:`axon_eg.cli.cache`) on the CLI's subparsers."""
    cache = sub.add_parser("cache", help="list or remove the cached optimization runs (see axon_eg.cli.cache)")
    csub = cache.add_subparsers(dest="cache_command", required=True)
    help_dir = "cache directory (default $AXON_EG_CACHE or ~/.cache/axon_eg)"
    p = csub.add_parser("ls", help="one line per cached run: program, key, hw, target, k, when, best, statuses, size")
    p.add_argument("--program", action="append", metavar="NAME", help="only this program's runs (repeatable)")
    p.add_argument("--cache", default=None, help=help_dir)
    p.set_defaults(func=cmd_cache)
    p = csub.add_parser("rm", help="remove runs (rows, bundles, parts) atomically: KEY..., --program NAME or --all")
    p.add_argument("keys", nargs="*", metavar="KEY", help="cache key or a unique prefix of >= "
                                                          f"{validate.MIN_KEY_PREFIX} characters")
    p.add_argument("--program", action="append", metavar="NAME", help="every run of this program (repeatable)")
    p.add_argument("--all", action="store_true", help="every run and bundle (damaged parts are kept)")
    p.add_argument("-n", "--dry-run", action="store_true", help="say what would be removed, remove nothing")
    p.add_argument("--cache", default=None, help=help_dir)
    p.set_defaults(func=cmd_cache)


def cmd_cache(args: argparse.Namespace) -> int:
    """``axon-eg cache ls`` or ``rm``: :func:`axon_eg.cli.cache.cmd_ls` or ``cmd_rm``."""
    from axon_eg.cli import cache as cache_cli  # lazy: loads polars (the tables); `axon-eg --help` must not

    return {"ls": cache_cli.cmd_ls, "rm": cache_cli.cmd_rm}[args.cache_command](args)


def _version() -> str:
    """The installed distribution's version (the package's own when run from a checkout)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("axon_eg")
    except PackageNotFoundError:
        return __version__


TRITON_DESCRIPTION = """\
Optimize an existing Triton program. FILE is either a KernelBench file (Model: the PyTorch reference;
ModelNew: the Triton kernels; get_inputs(), get_init_inputs()) or a file whose Model launches the kernels,
given with its reference (--reference, a KernelBench-format file) and, optionally, a YAML spec of the inputs
(--spec). The input file is the baseline; every stage's candidates (launch knobs, tile sizes, swizzle,
tensor descriptors, a persistent loop, an autotune grid, axon_eg's own kernels for the reference) are
checked against the float64 reference and, on a GPU, timed; best.py in --out is the fastest correct file
(the input when nothing beats it; under the Triton interpreter every candidate is checked, none timed).
An input written for another vendor's GPU (torch.xpu, "xpu" devices, grf_mode) is first retargeted to the
device at hand, each change recorded; a Model that builds its own weights gets the reference's (matched by
name, then by shape in order, a transposed weight by its shape).

Sizes: without --full, a KernelBench file runs at its SMALL_SIZES (module constants; a file without them
at its own sizes) and a spec at its small: section (without one, at its inputs); --sizes NAME=INT,... sets
module constants of a KernelBench-format file over those (not with --spec). A spec in Xe-Forge's form
(inputs by name over dims, inits, size-set sections such as ci: and bench-gpu: with a flop formula) runs at
its smallest size set, with --full at the largest that fits; --sizes SET picks one (a section, SECTION[i],
or a set's name). One line says which sizes and why. Then, before anything is allocated, the inputs,
parameters and outputs (with the float64 reference) must fit in 80% of the memory available and, under the
Triton interpreter (--cpu, or no GPU), hold at most
{elems:,} elements: otherwise one line names the sizes, the memory and --allow-large.

A spec (YAML) is checked whole before anything runs: inputs (one {{shape: [...], dtype: fp32}} per
forward() argument; also positive: true, or high: N for an index input), init (the __init__ arguments)
and small (the inputs and init of a quick run);
a dtype is one of {dtypes}.
An unknown key, dtype or value, or inputs that do not fit init (the reference run on fake tensors), is
one line naming the file and the key."""

TRITON_EPILOG = """\
exit status: 0 the input ran correctly (best.py written: the input or a faster candidate); 3 the input is wrong
against the reference and a candidate ran correctly (best.py is that candidate; the first line says so); 2 an
error, one line "axon-eg: error: ...": a bad argument, file or spec, sizes over the limits, or a run in which
nothing ran correctly, the input included (rows.json and the table still written); 130 / 143 interrupted
(SIGINT / SIGTERM: the rows measured so far are kept)."""


SPEC_DTYPES = ("fp32", "bf16", "fp16", "fp64", "bool", "int32", "int64")
"""The dtypes a spec's inputs may have: the harness's (``measure.harness.TORCH_DTYPES``, which imports torch:
restated so that ``--help`` stays fast; a test ties the two)."""


def add_optimize_triton(sub: Any) -> None:
    p = sub.add_parser("optimize-triton", help="an existing Triton program in, its stages' candidates checked and "
                                                "timed, the fastest correct file out",
                       description=TRITON_DESCRIPTION.format(elems=validate.INTERPRETER_ELEMS, dtypes=", ".join(SPEC_DTYPES)),
                       epilog=TRITON_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", metavar="FILE", help="a KernelBench file with Model and ModelNew, or a file whose Model "
                                                "launches the kernels")
    p.add_argument("--reference", metavar="REF", help="the PyTorch reference (a KernelBench-format file) when FILE's "
                                                      "Model launches the kernels")
    p.add_argument("--spec", metavar="YAML", help="the inputs ([{shape: [...], dtype: fp32}, ...]), init (the __init__ "
                                                  "arguments) and small (the same for a quick run); default: the "
                                                  "reference's get_inputs() and get_init_inputs()")
    _size_options(p, triton=True)
    p.add_argument("--hw", default=DEFAULT_HW, help=f"hardware description (data/hw_costs; default {DEFAULT_HW})")
    p.add_argument("--out", help="output directory (default axon_eg_out/triton_<file>)")
    p.add_argument("--cpu", action="store_true", help="ignore GPUs: check under the Triton interpreter only, no timing")
    optimize_cli.allow_large_option(p)
    p.set_defaults(func=cmd_optimize_triton)


def cmd_optimize_triton(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape

    from axon_eg.triton_in import run as triton_run  # lazy: loads libcst; `axon-eg --help` must not

    t0 = time.monotonic()
    console = Console(highlight=False)
    path = validate.readable_file(args.file, "FILE")
    reference = validate.readable_file(args.reference, "--reference") if args.reference else None
    spec = validate.readable_file(args.spec, "--spec") if args.spec else None
    validate.hardware(args.hw, "--hw")
    out = validate.output_dir(args.out or Path("axon_eg_out") / f"triton_{path.stem}", "--out")
    if isinstance(args.sizes, str) and spec is None:
        raise InvalidArgument(f"--sizes {args.sizes!r}: a size set is an Xe-Forge spec's (--spec YAML); without one "
                              "--sizes is NAME=INT,... module constants")
    if isinstance(args.sizes, dict):
        text = ",".join(f"{k}={v}" for k, v in args.sizes.items())
        if spec is not None:
            raise InvalidArgument(f"--sizes {text!r}: with --spec the sizes are the spec's inputs and init (its small: "
                                  "section without --full; an Xe-Forge spec's size set: --sizes SET); NAME=INT sets "
                                  "module constants of a KernelBench-format file")
        optimize_cli.check_size_names(reference or path, args.sizes, text)

    def say(line: str) -> None:
        optimize_cli.say(console, line)

    interpreter = optimize_cli.interpreter_reason(args.cpu)

    def check(call: Any) -> None:
        kb = spec is None
        head = ("--cpu without --full" if args.cpu else "without --full") if not args.full and kb else "sizes"
        say(f"{head}: {call.note}")
        if args.allow_large:
            return
        ins, outs = call.tensors()
        smaller = ("a smaller spec" if not kb else "--sizes NAME=INT,... over its module constants") + \
            (", or drop --full" if args.full else "")
        validate.phase2_size(f"{path.name} at {call.at} (inputs {call.describe()})", ins, outs, interpreter=interpreter,
                             smaller=smaller)

    with optimize_cli.progress_bar(console, t0, triton_run.PHASES) as (progress, _finish):
        result = triton_run.optimize_triton(path, reference=reference, spec=spec, hw=args.hw, out=out,
                                            device="cpu" if args.cpu else None, small=not args.full,
                                            sizes=args.sizes, progress=progress, check=check)
    if result.input_wrong:  # said first, and loudly: what the user brought does not compute the reference
        row = result.input_row
        why = (row.get("error") or "").strip().splitlines()
        detail = escape(f"{row.get('status')}{': ' + why[0][:200] if why else ''}; best.py is {result.best}, the "
                        f"{'fastest' if result.timed else 'first'} correct candidate")
        console.print(f"[bold red]the input is wrong against the reference[/bold red]: {detail}", highlight=False,
                      soft_wrap=True)
    say(result.summary())
    say(f"\nwrote {result.best_path}  rows: {out / 'rows.json'}")
    if not any(r.get("status") == "ok" for r in result.rows):
        counts = ", ".join(f"{n} {k}" for k, n in sorted(triton_run._count(r.get("status") for r in result.rows).items()))
        first = next((r for r in result.rows if r["id"] == "input"), result.rows[0])
        why = (first.get("error") or "").strip().splitlines()
        print(f"axon-eg: error: nothing ran correctly, the input included ({len(result.rows)} rows: {counts}); the input: "
              f"{first.get('status')}{': ' + why[0][:200] if why else ''}; every row: {out / 'rows.json'}", file=sys.stderr)
        return 2
    return 3 if result.input_wrong else 0


def main(argv: list[str] | None = None) -> int:
    """Run one command. An AxonError (or a KeyError, or an OSError on a named file) is printed as
    ``axon-eg: error: <message>`` on stderr, without a traceback, and exits with status 2; set
    ``AXON_EG_TRACEBACK=1`` to see the traceback instead."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except OneLineInterrupt as e:  # phase 2 (children killed, rows kept) or phase 1: one line, 130 / 143
        print(e, file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:  # anywhere else (loading a file, proving rules): one line too
        print(f"axon-eg: interrupted (SIGINT) during `axon-eg {' '.join(sys.argv[1:2] if argv is None else argv[:1])}`",
              file=sys.stderr)
        return 130
    except (AxonError, KeyError, OSError) as e:
        if os.environ.get("AXON_EG_TRACEBACK") or (isinstance(e, OSError) and not isinstance(e, AxonError)
                                                   and e.filename is None):
            raise
        print(f"axon-eg: error: {_message(e)}", file=sys.stderr)
        return 2


def _message(e: BaseException) -> str:
    if isinstance(e, OSError) and not isinstance(e, AxonError):  # a file the command could not read or write
        return f"{e.filename}: {(e.strerror or str(e)).lower()}"
    if isinstance(e, KeyError) and e.args:
        return str(e.args[0])
    return str(e)

