"""The ``axon-eg`` command line. Only subcommands that work are listed.

    axon-eg ops                      the operator registry
    axon-eg suite                    the benchmark suite programs
    axon-eg inspect TARGET           print a program and run its float64 reference
    axon-eg show TARGET              the program's νGraph: e-classes, members, SVG
    axon-eg optimize TARGET          the whole pipeline: best kernel, report, table (see optimize_cli.py)
    axon-eg rules discover|verify|list   the Z3-proven rewrite rules
    axon-eg cache ls|rm              the cached runs: list them, remove some or all (see cache_cli.py)

TARGET is a suite program name, a KernelBench file (a file defining ``Model``, ``get_inputs`` or
``get_init_inputs``; it runs at its ``SMALL_SIZES`` unless ``--full``) or a .py file with one
``@ax.program``. Errors a user can fix are one line, ``axon-eg: error: <message>``, exit status 2.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import sys
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from axon_eg import validate
from axon_eg.errors import AxonError, ProblemLoadError
from axon_eg.measure.worker import Interrupted

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The source checkout's root when running from one (``src/axon_eg/cli.py``); in an installed wheel a
directory with no ``benchmarks/`` in it."""


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False)


def load_suite() -> Any:
    """The benchmark suite module, ``axon_eg.suite`` (it ships in the package; ``benchmarks/suite.py`` is
    the same module under its old name)."""
    from axon_eg import suite

    return suite


def load_identities() -> tuple[Any, ...]:
    """The hand-stated identities of ``benchmarks/identities.py``: test and benchmark data, kept out of
    the package on purpose (the optimizer never ships hand-written rules), so only a source checkout has them."""
    if not (REPO_ROOT / "benchmarks" / "identities.py").is_file():
        raise AxonError("--rules identities needs a source checkout (benchmarks/identities.py is not part of "
                        "the installed package); use --rules discovered or none")
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    from benchmarks.identities import IDENTITIES

    return tuple(IDENTITIES)


KERNELBENCH_NAMES = ("Model", "get_inputs", "get_init_inputs")
"""Top-level names of a KernelBench problem file: a file defining any of them is one."""


def _is_path(target: str) -> bool:
    return target.endswith(".py") or os.sep in target or "/" in target or Path(target).exists()


def target_kind(target: str) -> str:
    """"suite", "kernelbench" or "program" (a .py file with one ``@ax.program``), as ``load_target`` reads ``target``.

    A path must be a readable file (PathError otherwise, one line). A file is a KernelBench problem when it
    defines, at top level, any of ``Model``, ``get_inputs``, ``get_init_inputs`` (read without running it;
    ``load_problem`` then names the ones missing); otherwise it must define one ``@ax.program``."""
    if not _is_path(target):
        return "suite"
    path = validate.readable_file(target, "target")
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as e:
        raise ProblemLoadError(f"{path}:{e.lineno}: syntax error: {e.msg}") from None
    except ValueError as e:  # null bytes: not a Python source file
        raise ProblemLoadError(f"{path}: not a Python source file ({e})") from None
    defined: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.ImportFrom, ast.Import)):
            defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return "kernelbench" if defined & set(KERNELBENCH_NAMES) else "program"


@dataclass(frozen=True)
class Target:
    """What ``resolve_target`` loaded: the program with bound dims, fixed input values (a KernelBench file's
    inputs and parameters; None otherwise), the kind of target, and the sizes used with where they came from."""

    program: Any
    inputs: dict[str, Any] | None
    kind: str  # "suite", "kernelbench" or "program"
    sizes: dict[str, int]  # the dims bound, or a KernelBench file's module constants that were set
    note: str  # one line: which sizes and why ("using the file's small sizes batch_size=2, ... (SMALL_SIZES; ...)")


def resolve_target(target: str, *, small: bool, sizes: Mapping[str, int] | None = None) -> Target:
    """A suite name, a KernelBench file or a Python file defining an ``@ax.program``, at the sizes asked for.

    ``small``: a suite program's small sizes (else its H200 sizes); a KernelBench file's ``SMALL_SIZES``
    (else its own constants; a file without ``SMALL_SIZES`` runs at its own sizes, and ``note`` says so).
    ``sizes`` overrides on top: dims of a suite program or ``@ax.program``, module-level constants of a
    KernelBench file."""
    sizes = validate.sizes_mapping(sizes)
    kind = target_kind(target)
    if kind == "kernelbench":
        from axon_eg.ir.torch_import import load_problem, small_sizes

        path = Path(target)
        declared = small_sizes(path) if small else None
        used = {**(declared or {}), **(sizes or {})}
        problem = load_problem(path, sizes=used or None)
        given = f"{_fmt(sizes)} as given" if sizes else ""
        if not small:
            base = f"{path.name}'s own sizes (--full)"
        elif declared:
            base = f"the file's small sizes {_fmt(declared)} (SMALL_SIZES; --full for its own sizes)"
        else:
            base = f"{path.name}'s own sizes: it defines no SMALL_SIZES"
        note = f"using {given + ' over ' if given else ''}{base}"
        return Target(problem.program, problem.random_inputs(0), kind, used, note)
    if kind == "program":
        program = _program_from_module(Path(target))
        where = "the @ax.program's bindings"
    else:
        entry = load_suite().get(target)
        program = entry.bound(small=small)
        where = "the suite's small sizes (--full for the H200 sizes)" if small else "the suite's H200 sizes (--full)"
    if sizes:
        program = program.bind(sizes)
        where = f"{_fmt(sizes)} as given, the rest {where}"
    return Target(program, None, kind, program.bindings, f"using {_fmt(program.bindings) or 'no symbolic dims'} ({where})")


def load_target(target: str, *, small: bool, sizes: Mapping[str, int] | None = None) -> tuple[Any, dict[str, Any] | None]:
    """A Program from a suite name, a KernelBench file or a Python file defining an ``@ax.program``.

    Returns (program with bound dims, fixed input values or None); see ``resolve_target`` for ``small`` and
    ``sizes`` (under ``small`` a KernelBench file runs at its ``SMALL_SIZES``)."""
    t = resolve_target(target, small=small, sizes=sizes)
    return t.program, t.inputs


def _fmt(sizes: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def _program_from_module(path: Path) -> Any:
    from axon_eg.ir.program import Program

    spec = importlib.util.spec_from_file_location(f"axon_eg_user_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ProblemLoadError(f"{path}: cannot be imported as a Python module (expected a .py file with one "
                               "@ax.program, or a KernelBench problem)")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise ProblemLoadError(f"{e.filename or path}:{e.lineno}: syntax error: {e.msg}") from None
    except AxonError:  # raised by axon_eg on the user's line (a shape, an unknown ax.NAME): names itself
        raise
    except Exception as e:  # noqa: BLE001 - any other failure while running the file is the file's
        frames = [f for f in traceback.extract_tb(e.__traceback__) if Path(f.filename).resolve() == path.resolve()]
        where = f"{path}:{frames[-1].lineno}" if frames else str(path)
        raise ProblemLoadError(f"{where}: running it raised {type(e).__name__}: {e}") from e
    programs = [v for v in vars(module).values() if isinstance(v, Program)]
    if len(programs) != 1:
        found = ", ".join(p.name for p in programs) or "none"
        raise ProblemLoadError(f"{path}: expected exactly one @ax.program at module level, found {found} (or a "
                               f"KernelBench problem: {', '.join(KERNELBENCH_NAMES)})")
    return programs[0]


# ------------------------------------------------------------------------------------------------
def cmd_ops(args: argparse.Namespace) -> int:
    from rich.table import Table

    from axon_eg.ir import ops as O

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
        table.add_row(e.name, e.kind, str(sum(1 for n in e.program.nodes if n.op not in ("input", "constant"))),
                      sizes, e.description)
    _console().print(table)
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    import numpy as np

    from axon_eg.ir.inputs import random_inputs
    from axon_eg.ir.interpret import interpret

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

    from axon_eg.egraph.nugraph import Limits, NuGraph
    from axon_eg.egraph.views import members, to_text

    console = _console()
    program, _ = load_target(args.target, small=not args.full, sizes=args.sizes)
    rules = []
    if args.rules == "discovered":
        from axon_eg.rules_discovered.store import load_rules

        rules = load_rules()
    elif args.rules == "identities":
        rules = list(load_identities())
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

    from axon_eg.rules_discovered.driver import discover

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
    from axon_eg.rules_discovered.verify import verify

    console = _console()
    report = verify(jobs=args.jobs, timeout_ms=args.timeout_ms)
    failures = report.failures
    for name, why in failures:
        console.print(f"[red]FAILED[/red] {name}: {why}", markup=True, highlight=False)
    console.print(f"re-proved {report.total - len({n for n, _ in failures})} of {report.total} stored rules from their "
                  f"text in {report.seconds:.1f} s (proofs {report.proof_seconds:.1f} s, float-safety verdicts "
                  f"{report.safety_seconds:.1f} s)")
    from axon_eg.backends.nki.synthesis import verify as verify_lowerings

    isa_failures, isa_total, isa_seconds = verify_lowerings(timeout_ms=args.timeout_ms)
    for name, why in isa_failures:
        console.print(f"[red]FAILED[/red] NKI lowering {name}: {why}")
    console.print(f"re-proved {isa_total - len(isa_failures)} of {isa_total} NKI lowerings and instruction fusions "
                  f"in {isa_seconds:.1f} s")
    return 1 if failures or isa_failures else 0


def cmd_rules_list(args: argparse.Namespace) -> int:
    from axon_eg.rules_discovered.store import load_stored

    console = _console()
    for stored in load_stored():
        e = stored.entry
        if args.family and e["family"] != args.family:
            continue
        safe = "".join(("→" if e["float_safe"]["forward"] else "·", "←" if e["float_safe"]["backward"] else "·"))
        cond = f"   if {' '.join(e['conditions'])}" if e["conditions"] and args.conditions else ""
        console.print(f"{e['name']:40s} {safe} {e['lhs']}  =>  {e['rhs']}{cond}", markup=False, soft_wrap=True)
    return 0


def _size_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--full", action="store_true", help="full sizes: a suite program's H200 sizes, a KernelBench "
                   "file's own (default: small sizes, the suite's or the file's SMALL_SIZES)")
    p.add_argument("--sizes", type=_sizes_type, default=None, metavar="NAME=INT,...",
                   help="set sizes over those: dims of a suite program or @ax.program, module-level constants of "
                        "a KernelBench file (e.g. batch_size=4)")


def _sizes_type(text: str) -> dict[str, int]:
    try:
        return validate.parse_sizes(text, "--sizes")
    except AxonError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="axon-eg", description="axon_eg: a superoptimizer for tensor programs")
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
    p.add_argument("--rules", choices=["discovered", "identities", "none"], default="discovered",
                   help="saturate with the discovered rules (default), the stated identities of "
                        "benchmarks/identities.py (source checkout only), or not at all")
    p.add_argument("--iterations", type=int, default=30)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--eclass", help="list the members of one e-class")
    p.add_argument("--text", action="store_true", help="print every e-class with its e-nodes")
    p.add_argument("--svg", help="write the e-graph as SVG (needs graphviz)")
    p.set_defaults(func=cmd_show)

    from axon_eg.optimize_cli import add_parser as add_optimize

    add_optimize(sub)

    from axon_eg import cache_cli

    cache_cli.add_parser(sub)

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


def main(argv: list[str] | None = None) -> int:
    """Run one command. An AxonError (or a KeyError, or an OSError on a named file) is printed as
    ``axon-eg: error: <message>`` on stderr, without a traceback, and exits with status 2; set
    ``AXON_EG_TRACEBACK=1`` to see the traceback instead."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except Interrupted as e:  # SIGINT / SIGTERM in phase 2: children killed, rows kept; one line, 130 / 143
        print(e, file=sys.stderr)
        return e.exit_code
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


if __name__ == "__main__":
    sys.exit(main())
