"""Run NKI kernel source with NumPy, in either NKI dialect, enforcing the Trainium limits of :mod:`.isa`.

    outputs = simulate(source, a, b, target="trn2")                 # source text, a Path or a function
    outputs, trace = simulate(source, a, b, target="trn2", trace=True)

The kernel runs against fake ``nki`` / ``nki.language`` / ``nki.isa`` modules (current dialect: instructions
write a destination, ``nisa.nc_matmul(dst, stationary, moving)``) or ``neuronxcc.nki...`` (legacy dialect:
instructions return tiles, ``res[...] += nisa.nc_matmul(stationary, moving)``), resolved by the kernel's own
imports and placed in ``sys.modules`` only while it runs (never over a real installed package).

Semantics: one instruction at a time, in program order. Every new buffer holds NaN and reading an element
no instruction wrote raises NkiUninitializedError, as does returning one. Engines compute in fp32; values
stored to bf16/fp16 tiles are rounded to nearest even; PSUM holds fp32 and ``nc_matmul`` accumulates there.
Memory spaces, tile limits, live PSUM banks and live SBUF bytes per partition are checked against the
hardware file; an on-chip buffer holds its memory from its first write until the kernel drops its last
reference (CPython reference counting), a stand-in for the compiler's liveness. Legacy ``nl.zeros(...,
buffer=nl.psum)`` declares an empty accumulation bank (no instruction); ``+=`` of anything but a matmul into
PSUM is a Vector-engine add. ``nl.affine_range`` / ``nl.sequential_range`` yield symbolic-like indices
(:class:`nki_values.LoopIndex`): integer arithmetic, subscripts, slices and ``nl.arange`` expressions work, but
Python comparisons, ``bool()``, ``if``, ``min()`` and ``max()`` on them raise, as tracing on a NeuronCore would;
``nl.static_range`` yields Python ints. The trace lists each instruction with its engine, operands (shape, dtype,
memory, bytes, buffer id), source line and latency from :func:`isa.latency`, for a cost model to replay.

Supported surface (anything else raises NotImplementedError naming the API): ``nki.jit``/``baremetal``;
``nl.ndarray/zeros/ones/load/store/copy``, ``nl.arange/mgrid/ds/par_dim``, ``nl.affine_range/sequential_range/
static_range``, ``nl.tile_size.{pmax, gemm_stationary_fmax, gemm_moving_fmax}``, dtypes, buffers and op tokens;
the ``nisa`` instructions of :data:`isa.INSTRUCTIONS` (the declared ones, plus ``activation_reduce``) in the dialect's
signature, ``nisa.engine/reduce_cmd/dge_mode/oob_mode/nc_version``; views by ints, slices and ``nl.arange``
index expressions, ``.reshape``, ``.shape``, ``.dtype``, ``.buffer``; ``t[...] = r`` and ``t[...] += r``. Legacy
``mask=`` on loads, stores, copies, element-wise instructions and reductions: an index expression may reach past
its tensor where the mask leaves the elements out (the last partial tile), which are then neither read nor
written; touching one without a mask raises IndexError naming the view and the kernel line.

Layers, each importing only those before it: :mod:`.nki_values` (tensors, buffers, results, the trace),
:mod:`.session` (:class:`session.Session`, the state of one run), :mod:`.nki_namespaces` (``Language``, ``Isa``,
``LegacyIsa``: one class per namespace, over a session), :mod:`.nki_modules` (the fake modules, the import hook)
and this module's :func:`simulate`.
"""

from __future__ import annotations

import builtins
import inspect
import itertools
import linecache
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from axon_eg import hw
from axon_eg.errors import AxonError

from .isa import NkiSimulationError
from .nki_modules import fake_modules, importer, installed, kernel_line, kernel_source, pick_kernel
from .nki_values import CURRENT, LEGACY, ROOTS, Trace
from .session import Session


# ------------------------------------------------------------------------------------------- simulate
def simulate(kernel: str | Path | Callable[..., Any], *inputs: Any, target: str = "trn2", dialect: str | None = None,
             trace: bool = False, kernel_name: str | None = None, kernel_kwargs: Mapping[str, Any] | None = None,
             grid: tuple[int, ...] | int | None = None) -> Any:
    """Run an NKI kernel on NumPy ``inputs`` (HBM tensors; other arguments pass through) for ``target``.

    ``kernel``: source text (the ``@nki.jit`` function in it is run, or ``kernel_name``), a Path to a file, or a
    Python function (its source is run again against the simulated modules). ``grid``: an SPMD launch
    (``kernel[2, 3](...)``): the kernel runs once per program, in order, with ``nl.program_id`` /
    ``nl.num_programs`` telling it which, and every program's k-th ``shared_hbm`` tensor the same one; the
    outputs are those of the last program (the shared tensors, once every program wrote its part). ``dialect``: ``"current"``
    (``import nki``) or ``"legacy"`` (``import neuronxcc.nki``); by default read off the source. Returns what the
    kernel returns (NumPy arrays in the kernel's dtypes), and with ``trace=True`` ``(outputs, Trace)``.
    Raises NkiLimitError, NkiUninitializedError, NkiSimulationError, ShapeError, DtypeError or
    NotImplementedError (an NKI API outside the simulated surface), each naming the kernel line in a note.
    """
    spec = hw.load(target)
    if spec.kind != "trainium":
        raise NkiSimulationError(f"target {target!r} is a {spec.kind}, not a Trainium")
    source, filename, name = kernel_source(kernel)
    dialect = dialect or (LEGACY if "neuronxcc" in source else CURRENT)
    if dialect not in ROOTS:
        raise NkiSimulationError(f"unknown NKI dialect {dialect!r}; use {CURRENT!r} or {LEGACY!r}")
    if dialect == CURRENT and spec.get("features.nki_dialect") == LEGACY:
        raise NkiSimulationError(f"{spec.name} runs only the legacy dialect (features.nki_dialect in {spec.name}.yaml): "
                                 f"write the kernel against neuronxcc.nki")
    session = Session(spec, dialect, filename)
    session.grid = tuple(int(g) for g in ((grid,) if isinstance(grid, int) else grid or ()))
    if any(g < 1 for g in session.grid):
        raise NkiSimulationError(f"grid {list(session.grid)}: every axis needs at least one program")
    modules = fake_modules(session)
    root = modules[ROOTS[dialect]] if dialect == CURRENT else modules["neuronxcc.nki"]
    namespace = dict(kernel.__globals__) if inspect.isfunction(kernel) else {}
    namespace.update({"__name__": "__nki_kernel__", "__file__": filename, "nki": root, "nl": root.language,
                      "nisa": root.isa, "__builtins__": {**builtins.__dict__, "__import__": importer(modules, dialect)}})
    try:
        with installed(modules):
            exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - running the kernel is the point
            fn = pick_kernel(namespace, kernel_name or name)
            args = [session.hbm_input(a, i) for i, a in enumerate(inputs)]
            for program in itertools.product(*(range(g) for g in session.grid)):
                session.program, session.shared_next = program, 0
                result = fn(*args, **dict(kernel_kwargs or {}))
            outputs = session.collect(result)
    except (AxonError, NotImplementedError, IndexError) as error:
        line = kernel_line(error, filename)
        if line is not None:
            error.add_note(f"at {filename} line {line}")
        raise
    if filename.startswith("<nki-kernel-"):  # kept only while a traceback may need the source lines
        linecache.cache.pop(filename, None)
    return (outputs, Trace(spec.name, dialect, tuple(session.entries))) if trace else outputs
