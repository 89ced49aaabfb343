"""What a run returns: :class:`Result` (the selected :class:`BestKernel`, the run's table, the cache key,
phase timings) and :class:`PipelineError`; :func:`markdown` renders a table for ``Result.summary``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from axon_eg.backends.kernel import call_signature, check_call
from axon_eg.errors import AxonError, KernelCallError
from axon_eg.ir.program import Program
from axon_eg.targets import backend_for_mode

if TYPE_CHECKING:  # the tables are Polars frames; a kernel's call, the CLI and --help need no polars
    import polars as pl


class PipelineError(AxonError):
    """The program or the request cannot go through the pipeline (unbound dims, unknown target)."""

    table: pl.DataFrame | None = None  # when nothing ran correctly: the run's table, with verdicts


class BestKernel:
    """The selected kernel: ``best(*tensors)`` returns the output(s); ``best.source`` is its file.

    A call first checks its arguments against the program's inputs, whichever kernel was selected: their
    number, shapes and dtypes, and (torch tensors) one device and contiguous row-major layout; a mismatch
    raises ``KernelCallError`` naming the argument. NKI kernels take NumPy arrays (any layout: the
    simulator copies them)."""

    def __init__(self, id: str, kind: str, path: Path, entry: str, mode: str, program: Program, target: str = ""):
        self.id, self.kind, self.path, self.entry, self.mode, self.program = id, kind, Path(path), entry, mode, program
        self.target = target  # the hardware name (an NKI kernel runs in the simulator for it)

    @property
    def source(self) -> str:
        return self.path.read_text()

    @cached_property
    def _backend(self) -> Any:
        """The backend that calls kernels of this mode: it says what arguments they take and runs them."""
        return backend_for_mode(self.mode)

    @cached_property
    def _signature(self) -> tuple[tuple[str, tuple[int, ...], Any], ...]:
        """(input name, shape, the backend's dtype object) per program input."""
        _, dtypes, _ = self._backend.argument_types()
        return tuple((n, s, dtypes.get(d or "") if d else None) for n, s, d in call_signature(self.program, outputs=False))

    def check(self, inputs: tuple[Any, ...]) -> None:
        """Raise KernelCallError when ``inputs`` do not fit what the kernel was built for (see the class)."""
        tensor, _, layout = self._backend.argument_types()
        check_call(tuple(inputs), (), self._signature, f"{self.program.name} kernel {self.id}", KernelCallError,
                   tensor, layout)

    def __call__(self, *inputs: Any) -> Any:
        self.check(inputs)
        return self._backend.call(self, tuple(inputs))

    def __repr__(self) -> str:
        return f"BestKernel({self.id!r}, {self.kind}, {self.path})"


SUMMARY_COLUMNS = ("bucket", "id", "kind", "verdict", "status", "predicted_us", "median_us", "iqr_us",
                   "bucket_worst", "speedup_vs_eager", "speedup_vs_compile", "max_abs_err", "lowering", "plan",
                   "tuned_at")
SHAPE_BUCKET_COLUMNS = ("bucket", "bucket_worst", "tuned_at")
"""Shown only where some row has a value (a run with shape buckets)."""


@dataclass
class Result:
    best: BestKernel
    table: pl.DataFrame  # every candidate and baseline of this run, with its verdict
    cache_key: str
    cache_hit: bool
    phase1_s: float
    phase2_s: float
    timed: bool  # whether latencies were measured (False: CPU interpreter, correctness only)
    bundle: Path
    _graph: Callable[[], Any] = field(repr=False)
    measured: tuple[str, ...] = ()  # ids whose observations this call added (measured, imported or resumed)
    reused: tuple[str, ...] = ()  # ids whose final observation came from the cache, not measured again
    buckets: tuple[tuple[dict[str, tuple[int, int]], Result], ...] = ()  # a bucketed run (``axon_eg.buckets``):
    # each bucket's ranges and its own run's result; ``best`` then dispatches between their selections
    stages: dict[str, Any] = field(default_factory=dict)  # where the bundle's phase 1 went (``pipeline.phase1_stages``):
    # seconds of saturation, extraction and emission, how saturation stopped, what the enumeration's budgets left out

    @cached_property
    def nugraph(self) -> Any:
        """The saturated νGraph (rebuilt on demand after a cache hit)."""
        return self._graph()

    def summary(self, columns: tuple[str, ...] = SUMMARY_COLUMNS) -> str:
        """One line on the choice and the run, then the table as Markdown."""
        devices = [d for d in self.table["device"].drop_nulls().to_list()] if "device" in self.table.columns else []
        if any(str(d).startswith("simulated") for d in devices):
            how = "NKI simulator for correctness, Trainium engine model for time (no NeuronCore here)"
        elif any(str(d).startswith("measured (trn") for d in devices):
            how = "compiled and timed on the NeuronCore (Neuron toolchain)"
        else:
            how = "timed on the GPU" if self.timed else "correctness only (Triton interpreter, no GPU timings)"
        return (f"best: {self.best.id} ({self.best.kind}); {how}; cache {'hit' if self.cache_hit else 'miss'} "
                f"{self.cache_key}; phase 1 {self.phase1_s:.2f} s{_stages(self.stages)}, phase 2 {self.phase2_s:.2f} s "
                f"({len(self.measured)} measured, {len(self.reused)} from the cache)\n\n"
                + markdown(self.table.select([c for c in columns if c in self.table.columns and not (
                    c in SHAPE_BUCKET_COLUMNS and self.table[c].null_count() == self.table.height)])))


def _stages(stages: dict[str, Any]) -> str:
    """`` (saturation 0.52 s, extraction 1.31 s, emission 0.20 s)`` from a phase 1 record, empty without one."""
    parts = [f"{name} {stages[f'{name}_s']:.2f} s" for name in ("saturation", "extraction", "emission")
             if isinstance(stages.get(f"{name}_s"), (int, float))]
    if stages.get("reused"):
        parts.append("served by an identical region's phase 1")
    if (stages.get("saturation") or {}).get("clock_limited"):
        parts.append("saturation cut by its seconds cap")
    return f" ({', '.join(parts)})" if parts else ""


def markdown(df: pl.DataFrame) -> str:
    """A Polars frame as a Markdown table (floats to 4 significant digits, errors on one line)."""

    def cell(v: Any) -> str:
        if v is None:
            return ""
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v).replace("|", "/").replace("\n", " ")[:100]

    head = "| " + " | ".join(df.columns) + " |"
    rule = "|" + "---|" * len(df.columns)
    return "\n".join([head, rule, *("| " + " | ".join(cell(v) for v in row) + " |" for row in df.iter_rows())])


__all__ = ["SUMMARY_COLUMNS", "BestKernel", "PipelineError", "Result", "markdown"]
