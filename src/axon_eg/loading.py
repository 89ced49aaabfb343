"""What a TARGET argument of ``axon-eg`` names, and the program it loads at the sizes asked for.

A suite program name, a KernelBench problem file (a file defining ``Model``, ``get_inputs`` or
``get_init_inputs``) or a .py file with one ``@ax.program``: ``validate.target_kind`` tells them apart
without running the file, ``resolve_target`` loads one (``Target``: the program, fixed inputs, the sizes and
a line saying where they came from). The CLI, the Triton-to-Triton flow and the tests load targets here.
"""

from __future__ import annotations

import importlib.util
import os
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from axon_eg import validate
from axon_eg.errors import AxonError, ProblemLoadError
from axon_eg.ir.program import Program
from axon_eg.validate import KERNELBENCH_NAMES, target_kind


def load_suite() -> Any:
    """The benchmark suite module, ``axon_eg.suite`` (it ships in the package; ``benchmarks/suite.py`` is
    the same module under its old name): imported here, when first asked for, as it loads torch."""
    from axon_eg import suite  # lazy: loads torch; the CLI imports this module for --help

    return suite


@dataclass(frozen=True)
class Target:
    """What ``resolve_target`` loaded: the program with bound dims, the kind of target, the sizes used with
    where they came from, and ``inputs``: fixed input values (a KernelBench file's random inputs and its
    parameters; None otherwise), made when first read (loading allocates no input memory)."""

    program: Any
    kind: str  # "suite", "kernelbench" or "program"
    sizes: dict[str, int]  # the dims bound, or a KernelBench file's module constants that were set
    note: str  # one line: which sizes and why ("using the file's small sizes batch_size=2, ... (SMALL_SIZES; ...)")
    make_inputs: Callable[[], dict[str, Any]] | None = field(default=None, repr=False, compare=False)

    @cached_property
    def inputs(self) -> dict[str, Any] | None:
        return self.make_inputs() if self.make_inputs is not None else None


def kernelbench_sizes(path: str | os.PathLike[str], *, small: bool,
                      sizes: Mapping[str, int] | None = None) -> tuple[dict[str, int], str]:
    """(the module constants to set, one line saying which sizes and why) for a KernelBench-format file: under
    ``small`` its ``SMALL_SIZES`` (none: its own sizes, and the line says so), ``sizes`` over those. Read
    without running the file (``ir.torch_import.small_sizes``); ``axon-eg optimize`` and ``optimize-triton``
    both choose sizes this way."""
    from axon_eg.ir.torch_import import small_sizes  # lazy: loads torch; the CLI imports this module for --help

    path = Path(path)
    declared = small_sizes(path) if small else None
    used = {**(declared or {}), **(sizes or {})}
    given = f"{_fmt(sizes)} as given" if sizes else ""
    if not small:
        base = f"{path.name}'s own sizes (--full)"
    elif declared:
        base = f"the file's small sizes {_fmt(declared)} (SMALL_SIZES; --full for its own sizes)"
    else:
        base = f"{path.name}'s own sizes: it defines no SMALL_SIZES"
    return used, f"using {given + ' over ' if given else ''}{base}"


def resolve_target(target: str, *, small: bool, sizes: Mapping[str, int] | None = None) -> Target:
    """A suite name, a KernelBench file or a Python file defining an ``@ax.program``, at the sizes asked for.

    ``small``: a suite program's small sizes (else its H200 sizes); a KernelBench file's ``SMALL_SIZES``
    (else its own constants; a file without ``SMALL_SIZES`` runs at its own sizes, and ``note`` says so).
    ``sizes`` overrides on top: dims of a suite program or ``@ax.program``, module-level constants of a
    KernelBench file. No input memory is allocated (a KernelBench file's inputs are fake until
    ``Target.inputs`` is read)."""
    sizes = validate.sizes_mapping(sizes)
    kind = target_kind(target)
    if kind == "kernelbench":
        from axon_eg.ir.torch_import import load_problem  # lazy: loads torch; the CLI imports this module for --help

        used, note = kernelbench_sizes(target, small=small, sizes=sizes)
        problem = load_problem(Path(target), sizes=used or None)
        return Target(problem.program, kind, used, note, lambda: problem.random_inputs(0))
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
    return Target(program, kind, program.bindings, f"using {_fmt(program.bindings) or 'no symbolic dims'} ({where})")


def load_target(target: str, *, small: bool, sizes: Mapping[str, int] | None = None) -> tuple[Any, dict[str, Any] | None]:
    """A Program from a suite name, a KernelBench file or a Python file defining an ``@ax.program``.

    Returns (program with bound dims, fixed input values or None); see ``resolve_target`` for ``small`` and
    ``sizes`` (under ``small`` a KernelBench file runs at its ``SMALL_SIZES``)."""
    t = resolve_target(target, small=small, sizes=sizes)
    return t.program, t.inputs


def _fmt(sizes: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def _program_from_module(path: Path) -> Any:
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
