"""Arguments checked up front, before any work: one-line errors that name the argument and the value.

The pipeline calls ``pipeline_arguments`` first thing (``saturate_and_extract``, ``write_bundle_only``),
so a bad ``k``, ``budget_s``, hardware path or cache directory, or a dtype the measurement harness cannot
check, is refused before phase 1 rather than after it. The CLI calls ``optimize_arguments`` on its
parsed options (the same checks under the options' names: ``-k``, ``--budget``, ``--hw``, ``--cache``,
``--rows``, ``--out``) and ``output_dir`` once it knows the output directory. Every error is an
``axon_eg.errors.InvalidArgument`` (``PathError`` for paths, ``DtypeError`` for dtypes), which the CLI
prints as one line, ``axon-eg: error: ...``, with exit status 2.

An output directory is checked by writing a probe file in it (or in its nearest existing ancestor when
it does not exist yet; nothing is created), so a read-only file system is caught as well as a mode.
The cache directory is only checked to be a directory path: a read-only cache still serves hits, and
the pipeline checks that a miss can write it before phase 1 (``measure.tables.ensure_writable``).
"""

from __future__ import annotations

import argparse
import ast
import math
import numbers
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from axon_eg.backends.base import TARGETS
from axon_eg.errors import DtypeError, InvalidArgument, PathError, ProblemLoadError
from axon_eg.hw import DEFAULT_HW, load
from axon_eg.targets import backend_for

SIZES_FORMAT = "NAME=INT[,NAME=INT...], e.g. M=64,N=32 or batch_size=4"

MIN_KEY_PREFIX = 4
"""The shortest prefix of a cache key that ``axon-eg cache rm KEY`` accepts (``cli.cache``)."""


# ------------------------------------------------------------------------------------------------
# Numbers
# ------------------------------------------------------------------------------------------------
def positive_int(value: Any, name: str) -> int:
    """``value`` as an int >= 1 (an integral number; not a bool, not 2.5); InvalidArgument naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise InvalidArgument(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def positive_seconds(value: Any, name: str) -> float:
    """``value`` as a finite number of seconds > 0; InvalidArgument naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        raise InvalidArgument(f"{name} must be a number of seconds > 0, got {value!r}")
    return float(value)


def parse_sizes(text: str, name: str = "--sizes") -> dict[str, int]:
    """``"M=64,N=32"`` -> ``{"M": 64, "N": 32}``; InvalidArgument naming ``name`` otherwise."""
    sizes: dict[str, int] = {}
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise InvalidArgument(f"{name} {text!r}: expected {SIZES_FORMAT}")
    for part in parts:
        key, eq, value = (s.strip() for s in part.partition("="))
        if not eq or not key.isidentifier():
            raise InvalidArgument(f"{name} {text!r}: {part!r} is not NAME=INT ({SIZES_FORMAT})")
        if not re.fullmatch(r"[0-9]+", value) or int(value) < 1:
            raise InvalidArgument(f"{name} {text!r}: {key} must be an integer >= 1, got {value!r}")
        if key in sizes:
            raise InvalidArgument(f"{name} {text!r}: {key} is given twice")
        sizes[key] = int(value)
    return sizes


def sizes_mapping(sizes: Any, name: str = "sizes") -> dict[str, int] | None:
    """A ``sizes=`` argument of the API: None, or a mapping of names to ints >= 1."""
    if sizes is None:
        return None
    if not isinstance(sizes, Mapping):
        raise InvalidArgument(f"{name} must be a mapping of names to integers (e.g. {{'batch_size': 4}}), got "
                              f"{type(sizes).__name__} {sizes!r}")
    for key, value in sizes.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise InvalidArgument(f"{name}: {key!r} is not a name")
        positive_int(value, f"{name}[{key!r}]")
    return dict(sizes)


def buckets_arg(text: str) -> dict[str, list[int] | tuple[int, int]]:
    """``--buckets``: ``M=1,16,128`` (sizes to tune at) or ``M=1..16384`` (a range); several dims joined by
    ``;``. InvalidArgument naming the option otherwise."""
    out: dict[str, list[int] | tuple[int, int]] = {}
    for part in (p.strip() for p in text.split(";")):
        key, eq, value = (s.strip() for s in part.partition("="))
        if not eq or not key.isidentifier() or not value:
            raise InvalidArgument(f"--buckets {text!r}: expected NAME=INT,INT,... or NAME=LOW..HIGH, e.g. M=1,16,128")
        lo, dots, hi = value.partition("..")
        numbers = [lo, hi] if dots else value.split(",")
        if not all(re.fullmatch(r"\s*[0-9]+\s*", n) and int(n) >= 1 for n in numbers):
            raise InvalidArgument(f"--buckets {text!r}: the sizes of {key} must be integers >= 1")
        out[key] = (int(lo), int(hi)) if dots else [int(n) for n in numbers]
    return out


def ranges(program: Any, value: Any, name: str = "ranges") -> dict[str, tuple[int, int]] | None:
    """A shape bucket (``saturate_and_extract(ranges=...)``): None, or dim name -> inclusive (low, high) of
    ints, each a bound dim of ``program`` whose size lies in it, low >= 1."""
    if value is None or value == {}:
        return None
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"{name} must map dim names to (low, high), got {type(value).__name__} {value!r}")
    bound = program.bindings
    out: dict[str, tuple[int, int]] = {}
    for dim, span in value.items():
        if dim not in bound:
            raise InvalidArgument(f"{name}: {program.name} has no bound dim {dim!r} (its dims: {sorted(bound)})")
        if not isinstance(span, (tuple, list)) or len(span) != 2:
            raise InvalidArgument(f"{name}[{dim!r}] must be (low, high), got {span!r}")
        lo, hi = (positive_int(v, f"{name}[{dim!r}]") for v in span)
        if not lo <= bound[dim] <= hi:
            raise InvalidArgument(f"{name}[{dim!r}] = ({lo}, {hi}) must hold the program's size {dim}={bound[dim]}")
        out[dim] = (lo, hi)
    return out


# ------------------------------------------------------------------------------------------------
# argparse ``type=`` helpers (argparse prints its usage and ``argument -k: <message>``)
# ------------------------------------------------------------------------------------------------
def _argtype(check: Any, parse: Any, what: str) -> Any:
    def convert(text: str) -> Any:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        try:
            return check(value, "the value")
        except InvalidArgument as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    convert.__name__ = what
    return convert


k_type = _argtype(positive_int, int, "an integer >= 1")
"""``type=`` for ``-k``: an integer >= 1."""
budget_type = _argtype(positive_seconds, float, "a number of seconds > 0")
"""``type=`` for ``--budget``: a finite number of seconds > 0."""


# ------------------------------------------------------------------------------------------------
# Paths
# ------------------------------------------------------------------------------------------------
def readable_file(path: str | os.PathLike[str], name: str) -> Path:
    """An existing, readable regular file; PathError naming ``name`` and the path otherwise."""
    p = Path(path).expanduser()
    if not p.exists():
        raise PathError(f"{name} {p}: no such file")
    if p.is_dir():
        raise PathError(f"{name} {p}: is a directory, not a file")
    try:
        with open(p, "rb") as f:
            f.read(1)
    except OSError as e:
        raise PathError(f"{name} {p}: cannot read it ({e.strerror or e})") from None
    return p


def writable_dir(path: str | os.PathLike[str], name: str) -> Path:
    """A directory that exists and can be written, or that can be created: its nearest existing ancestor
    is a directory that can be written. Nothing is created. PathError naming ``name`` and the path."""
    p = directory(path, name)
    existing = p.absolute()
    while not existing.exists():
        existing = existing.parent
    problem = _cannot_write(existing)
    if problem:
        where = "cannot write in it" if existing == p.absolute() else f"cannot create it in {existing}"
        raise PathError(f"{name} {p}: {where}: {problem}")
    return p


def _cannot_write(directory: Path) -> str | None:
    """Why no file can be made in ``directory`` (the strerror), or None when a probe file could be."""
    if not os.access(directory, os.W_OK | os.X_OK):
        return "permission denied"
    try:
        fd, probe = tempfile.mkstemp(prefix=".axon_eg_probe_", dir=directory)
    except OSError as e:
        return (e.strerror or str(e)).lower()
    os.close(fd)
    os.unlink(probe)
    return None


def output_dir(path: str | os.PathLike[str], name: str = "--out") -> Path:
    """The output directory of a run (``--out``): writable or creatable, checked before phase 1."""
    return writable_dir(path, name)


def directory(path: str | os.PathLike[str], name: str) -> Path:
    """A path that is a directory or can become one: it is not a file, nor under one. Nothing is created
    and nothing written (see ``writable_dir`` for that)."""
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise PathError(f"{name} {p}: is a file, not a directory")
    existing = p.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise PathError(f"{name} {p}: cannot create it: {existing} is a file, not a directory")
    return p


def cache_directory(path: str | os.PathLike[str] | None, name: str = "cache_dir") -> Path:
    """The cache directory (``path``, else ``$AXON_EG_CACHE``, else ``~/.cache/axon_eg``) as a directory path.

    Only its shape is checked here: a read-only cache still serves cache hits, and the pipeline checks
    that a miss can write it (``measure.tables.ensure_writable``) before phase 1."""
    if path is None:
        env = os.environ.get("AXON_EG_CACHE")
        if env:
            return directory(env, f"{name} ($AXON_EG_CACHE)")
        return directory(Path.home() / ".cache" / "axon_eg", f"{name} (the default)")
    return directory(path, name)


def hardware(hw: Any, name: str = "hw") -> None:
    """A hardware argument: a HardwareSpec, a bundled target name, or the path of a readable YAML file (a
    directory or a missing file is refused here); then loaded, so that ``hw.load``'s errors (an unknown
    name with the close ones, a malformed file) come before any work too."""
    if not isinstance(hw, (str, os.PathLike)):
        if type(hw).__name__ == "HardwareSpec":
            return
        raise InvalidArgument(f"{name} must be a target name (h200, trn2, ...) or a YAML file, got "
                              f"{type(hw).__name__} {hw!r}")
    text = os.fspath(hw)
    if not text:
        raise InvalidArgument(f"{name} must be a target name (h200, trn2, ...) or a YAML file, got ''")
    if isinstance(hw, os.PathLike) or os.sep in text or "/" in text or text.endswith((".yaml", ".yml")):
        readable_file(text, name)  # as hw.load tells a path from a bundled name
    load(hw)  # an unknown name (with the close ones) or a malformed file, now rather than after loading the program


# ------------------------------------------------------------------------------------------------
# Programs
# ------------------------------------------------------------------------------------------------
def program_dtypes(program: Any, target: str = "triton") -> None:
    """Refuse, before phase 1, a program with a dtype the target cannot run or the measurement harness
    cannot check (DtypeError naming the input or output and its dtype)."""
    allowed, why = backend_for(target).program_dtypes()
    named = [(f"input {s.name!r}", s.dtype) for s in program.inputs]
    named += [(f"output {i}", program.nodes[o].dtype) for i, o in enumerate(program.outputs)]
    for what, dtype in named:
        if dtype.name not in allowed:
            raise DtypeError(f"{program.name}: {what} is {dtype.name}, which {why} does not handle (it handles "
                             f"{', '.join(allowed)}); cast it, e.g. to fp32, before optimizing")


def pipeline_arguments(prog: Any, target: str = "triton", hw: Any = DEFAULT_HW, k: Any = 8, budget_s: Any = None, *,
                       cache_dir: Any = None, rows: Any = None, saturation_s: Any = 2.0) -> None:
    """Every argument of ``saturate_and_extract`` / ``write_bundle_only``, checked before any work.

    Raises InvalidArgument (k, budget_s, saturation_s, hw), PathError (hw, cache_dir, rows) or
    DtypeError (a program dtype the target or the harness cannot handle), each naming the argument."""
    positive_int(k, "k")
    if budget_s is not None:
        positive_seconds(budget_s, "budget_s")
    positive_seconds(saturation_s, "saturation_s")
    hardware(hw, "hw")
    if rows is not None:
        readable_file(rows, "rows")
    program = getattr(prog, "program", prog)
    if target in TARGETS and all(hasattr(program, a) for a in ("inputs", "outputs", "nodes")):
        program_dtypes(program, target)  # (an unknown target, a non-Program: the pipeline's own errors)
    cache_directory(cache_dir, "cache_dir")


PRECISIONS = ("ieee", "strict", "tf32")
"""The fp32 matmul precision policies. ``ieee`` (torch.backends.cuda.matmul.allow_tf32 off, torch's
default): fp32 accuracy, by fp32 FMAs, the library's fp32 GEMM or the 3xTF32 split (``/3xtf32``, as
accurate as fp32 on finite operands below ``(1 - 2^-12) * FLT_MAX``; an infinite or NaN operand gives NaN
where fp32 FMAs give +-inf); ``strict``: fp32 FMAs and the library's fp32 GEMM only (no split);
``tf32``: TF32 tensor cores (only where the user allows it)."""


def precision(value: Any, name: str = "precision") -> str:
    """The fp32 matmul precision policy (``PRECISIONS``); None follows torch's
    ``torch.backends.cuda.matmul.allow_tf32`` (off by default, so ``ieee``)."""
    if value is None:
        try:
            import torch
        except ImportError:  # phase 1 without torch: torch's default
            return "ieee"
        return "tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee"
    if value not in PRECISIONS:
        raise InvalidArgument(f"{name}={value!r}: the fp32 matmul precision is one of {', '.join(PRECISIONS)}")
    return str(value)


def optimize_arguments(args: argparse.Namespace) -> None:
    """The options of ``axon-eg optimize`` (an argparse Namespace), checked before anything is loaded:
    ``-k >= 1``, ``--budget > 0``, ``--hw`` (a path must be a readable file), ``--out`` (when given: a
    directory that can be written or created), ``--cache`` (not a file; its writability is the pipeline's
    check), ``--rows`` (a readable file), TARGET (a path must be a readable file). Options the namespace
    lacks are skipped. ``--out``'s default depends on the
    program: check it with ``output_dir`` once known."""
    if getattr(args, "k", None) is not None:
        positive_int(args.k, "-k")
    if getattr(args, "budget", None) is not None:
        positive_seconds(args.budget, "--budget")
    if getattr(args, "hw", None) is not None:
        hardware(args.hw, "--hw")
    if getattr(args, "rows", None) is not None:
        readable_file(args.rows, "--rows")
    if getattr(args, "target", None) is not None:
        target_kind(args.target)
    if getattr(args, "out", None) is not None:
        output_dir(args.out, "--out")
    if hasattr(args, "cache"):
        cache_directory(args.cache, "--cache")
    if getattr(args, "precision", None) is not None:
        precision(args.precision, "--precision")


# ------------------------------------------------------------------------------------------------
# Sizes: what phase 2 will allocate, checked before anything is
# ------------------------------------------------------------------------------------------------
INTERPRETER_ELEMS = 1 << 22
"""The most elements (inputs, parameters and outputs together) a run under the Triton interpreter (``--cpu``,
or no GPU) takes without ``--allow-large``: about 4M, a few seconds per call of an element-wise kernel (the
interpreter runs about 1 us per element), and every candidate is called once per correctness trial."""
MEMORY_FRACTION = 0.8
"""The share of the memory available now that phase 2's tensors may take without ``--allow-large``."""
ALLOW_LARGE = "--allow-large"


def available_memory() -> int | None:
    """Bytes of memory available to this process now: Linux's ``MemAvailable``, under a cgroup (v2) limit
    what is left below it; elsewhere what ``sysconf`` reports; None when unknown."""
    found: list[int] = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit.isdigit():
            found.append(int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text().strip()))
    except (OSError, ValueError):
        pass
    if not found:
        try:
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (AttributeError, ValueError, OSError):
            return None
    return max(0, min(found))


def tensor_bytes(inputs: Any, outputs: Any) -> tuple[int, int]:
    """(elements, bytes) phase 2 holds for one call: ``inputs`` and ``outputs`` are (elements, bytes per
    element) pairs (parameters count as inputs). An input is held as made and as the float64 copy the
    reference reads; an output as the candidate wrote it, the float64 reference and the float64 copy of the
    candidate's it is compared with."""
    inputs, outputs = list(inputs), list(outputs)
    elements = sum(n for n, _ in inputs) + sum(n for n, _ in outputs)
    return elements, sum(n * (b + 8) for n, b in inputs) + sum(n * (b + 16) for n, b in outputs)


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 / 10 else f"{n / 2**20:.1f} MiB"


def phase2_size(what: str, inputs: Any, outputs: Any, *, interpreter: str | None, smaller: str,
                memory: int | None = None, limit: int | None = None) -> None:
    """Refuse, before anything is allocated, a run whose phase 2 would not fit: ``what`` names the program
    and its sizes, ``inputs`` / ``outputs`` are (elements, bytes per element) pairs (``tensor_bytes``);
    ``interpreter``: why the candidates run under the Triton interpreter ("--cpu", "no GPU here"), None
    on a GPU; ``smaller``: how to ask for smaller sizes. ``memory`` (default ``available_memory()``) and
    ``limit`` (default ``INTERPRETER_ELEMS``) for tests. InvalidArgument, one line naming the program, the
    sizes, the bytes needed, the memory available and ``--allow-large``."""
    elements, need = tensor_bytes(inputs, outputs)
    memory = available_memory() if memory is None else memory
    limit = INTERPRETER_ELEMS if limit is None else limit
    has = f"{_gib(memory)} of memory available" if memory is not None else "the memory available unknown"
    head = f"{what}: its inputs and outputs ({elements:,} elements) need about {_gib(need)} with the " \
           "float64 reference"
    tail = f"; use smaller sizes ({smaller}) or pass {ALLOW_LARGE}"
    if memory is not None and need > MEMORY_FRACTION * memory:
        raise InvalidArgument(f"{head}, over {MEMORY_FRACTION:.0%} of the {has}{tail}")
    if interpreter is not None and elements > limit:
        raise InvalidArgument(f"{head} ({has}), over the {limit:,} elements the Triton interpreter ({interpreter}) "
                              f"checks in reasonable time{tail}")


__all__ = ["ALLOW_LARGE", "INTERPRETER_ELEMS", "MEMORY_FRACTION", "SIZES_FORMAT", "available_memory", "budget_type",
           "cache_directory", "directory", "hardware", "k_type", "optimize_arguments", "output_dir", "parse_sizes",
           "phase2_size", "pipeline_arguments", "positive_int", "positive_seconds", "precision", "program_dtypes",
           "readable_file", "sizes_mapping", "tensor_bytes", "writable_dir"]


# ------------------------------------------------------------------------------------------------
# What a TARGET names (``axon_eg.loading`` loads it)
# ------------------------------------------------------------------------------------------------
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
    path = readable_file(target, "target")
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
