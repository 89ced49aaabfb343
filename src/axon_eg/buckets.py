"""Shape buckets: one optimization serving a range of sizes (``saturate_and_extract(prog, sizes=...)``).

``sizes`` names, per dim, the sizes to tune at (``{"M": [1, 16, 128]}``) or a range (``{"M": (1, 16384)}``,
tuned at its low end and at the powers of two above it up to its high end). Consecutive tuned sizes
bound the buckets: ``[1, 1], [2, 16], [17, 128]``; several dims give the product of their buckets. Each
bucket is one run of the pipeline at its largest size with ``ranges`` set to the bucket, so every
candidate is a shape-generic kernel whose recorded guards hold at every size of the bucket (or a
``compile_error`` row naming the guard that fails where); a bucket of one size gets static kernels. Phase
2 checks and times each bucket's candidates at its tuned size and at its low end and middle
(:func:`probe_bindings`; on a GPU, the tilings the cost model ranks first at those sizes are candidates
too) and selects the one whose worst ratio to the fastest at any of them is smallest (``measure.spread``);
the cache keys each bucket apart (``cache.bundle_key``), and
the result's ``best`` is a :class:`BucketedKernel`: each call reads the sizes off its arguments, picks
the bucket they fall in (raising ``KernelCallError`` naming the dim and the ranges outside them) and runs
that bucket's selected kernel. A bucket whose selection is a torch baseline runs torch code lowered for the
call's sizes (one file per size, cached).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from axon_eg.backends.kernel import check_call
from axon_eg.backends.torch.lower import emit_module
from axon_eg.errors import InvalidArgument, KernelCallError
from axon_eg.ir import dims as D
from axon_eg.ir.program import Program
from axon_eg.result import BestKernel, Result

Ranges = dict[str, tuple[int, int]]


def tuned_sizes(value: Any, dim: str) -> list[int]:
    """The sizes to tune dim ``dim`` at: a list as given (sorted, without repeats), or for a range
    ``(low, high)`` its low end, the powers of two inside it and its high end."""
    where = f"sizes[{dim!r}]"
    if isinstance(value, range):
        value = (value.start, value.stop - 1)
    if isinstance(value, tuple) and len(value) == 2:
        lo, hi = (_size(v, where) for v in value)
        if lo > hi:
            raise InvalidArgument(f"{where} = {value!r}: the range's low end is above its high end")
        powers = [1 << k for k in range(hi.bit_length() + 1) if lo < 1 << k < hi]
        return sorted({lo, *powers, hi})
    if isinstance(value, Sequence) and not isinstance(value, str) and value:
        return sorted({_size(v, where) for v in value})
    raise InvalidArgument(f"{where} must be a list of sizes or a (low, high) range, got {value!r}")


def _size(v: Any, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise InvalidArgument(f"{where}: sizes are integers >= 1, got {v!r}")
    return int(v)


def buckets(sizes: Mapping[str, Any]) -> list[Ranges]:
    """The buckets (dim -> inclusive (low, high)) of a ``sizes`` argument, in order; each is tuned at its
    high ends."""
    if not isinstance(sizes, Mapping) or not sizes:
        raise InvalidArgument(f"sizes must map dim names to sizes or ranges (e.g. {{'M': [1, 16, 128]}}), got {sizes!r}")
    per_dim = []
    for dim, value in sorted(sizes.items()):
        tuned = tuned_sizes(value, dim)
        per_dim.append([(dim, (lo + 1 if k else hi, hi)) for k, (lo, hi) in enumerate(zip([0, *tuned], tuned))])
    return [dict(combo) for combo in itertools.product(*per_dim)]


def probe_bindings(ranges: Mapping[str, tuple[int, int]]) -> list[dict[str, int]]:
    """The sizes of a bucket other than its tuned (high) end at which phase 2 also checks and times every
    candidate, and phase 1 also ranks tilings (``pipeline._phase1``): its low end and its geometric middle,
    every dim of more than one size together (``M in [17, 128]``: ``M=17``, ``M=47``)."""
    spans = {d: (lo, hi) for d, (lo, hi) in ranges.items() if lo < hi}
    out: list[dict[str, int]] = []
    for at in ({d: lo for d, (lo, _) in spans.items()}, {d: round(math.sqrt(lo * hi)) for d, (lo, hi) in spans.items()}):
        if at and at not in out and any(at[d] != hi for d, (_, hi) in spans.items()):
            out.append(at)
    return out


def describe(ranges: Ranges) -> str:
    return ", ".join(f"{d}={lo}" if lo == hi else f"{d} in [{lo}, {hi}]" for d, (lo, hi) in sorted(ranges.items()))


class BucketedKernel:
    """The selection of each bucket, dispatched on the call's sizes (see the module docstring)."""

    def __init__(self, program: Program, chosen: list[tuple[Ranges, BestKernel, Path]]):
        self.program, self.chosen = program, chosen
        self.dims = sorted(chosen[0][0]) if chosen else []
        self._at: dict[tuple[int, ...], BestKernel] = {}
        fixed = {k: v for k, v in program.bindings.items() if k not in self.dims}
        self.signature = tuple((spec.name, tuple(_spelled(d, fixed) for d in spec.shape), None)
                               for spec in program.inputs)

    @property
    def id(self) -> str:
        return "buckets(" + "; ".join(f"{describe(r)}: {b.id}" for r, b, _ in self.chosen) + ")"

    kind = "bucketed"

    def bucket(self, sizes: Mapping[str, int]) -> tuple[Ranges, BestKernel, Path]:
        """The bucket ``sizes`` fall in; KernelCallError naming the dim and the ranges when none."""
        for entry in self.chosen:
            if all(lo <= sizes[d] <= hi for d, (lo, hi) in entry[0].items()):
                return entry
        d = next(d for d in self.dims if not any(r[d][0] <= sizes[d] <= r[d][1] for r, _, _ in self.chosen))
        spans = sorted({r[d] for r, _, _ in self.chosen})
        covered = f"[{spans[0][0]}, {spans[-1][1]}]" if all(a[1] + 1 == b[0] for a, b in zip(spans, spans[1:])) \
            else ", ".join(f"[{lo}, {hi}]" for lo, hi in spans)
        raise KernelCallError(f"{self.program.name}: {d} = {sizes[d]} is outside the sizes it was optimized for "
                              f"({d} in {covered})")

    def __call__(self, *inputs: Any) -> Any:
        first = self.chosen[0][1]
        tensor, _, layout = first._backend.argument_types()
        sizes = check_call(tuple(inputs), (), self.signature, f"{self.program.name} (bucketed)", KernelCallError,
                           tensor, layout)
        key = tuple(sizes[d] for d in self.dims)
        best = self._at.get(key)
        if best is None:
            best = self._at[key] = self._kernel_at(sizes)
        best.check(tuple(inputs))
        return best._backend.call(best, tuple(inputs))

    def _kernel_at(self, sizes: Mapping[str, int]) -> BestKernel:
        """The bucket's selected kernel for a call at ``sizes``: the shape-generic file itself (bound to the
        call's sizes for its outputs), or a baseline's torch code lowered at those sizes."""
        ranges, best, bdir = self.bucket(sizes)
        program = self.program.bind({d: sizes[d] for d in self.dims})
        path = best.path
        if best.kind == "baseline" and any(lo != hi for lo, hi in ranges.values()):
            path = bdir / f"{best.id}-{'-'.join(f'{d}{sizes[d]}' for d in self.dims)}.py"
            if not path.exists():
                tmp = path.with_name(path.name + ".tmp")
                tmp.write_text(emit_module(program))
                tmp.replace(path)
        return BestKernel(best.id, best.kind, path, best.entry, best.mode, program, best.target)

    @property
    def source(self) -> str:
        return "\n\n".join(f"# ===== bucket {describe(r)}: {b.id}\n{b.source}" for r, b, _ in self.chosen)

    def __repr__(self) -> str:
        return f"BucketedKernel({self.id})"


def _spelled(d: D.Dim, fixed: Mapping[str, int]) -> int | str:
    v = D.substitute(d, fixed)
    return v if isinstance(v, int) else str(v)


def optimize(program: Program, sizes: Mapping[str, Any], run: Callable[..., Result], **options: Any) -> Result:
    """``saturate_and_extract(prog, sizes=...)``: ``run`` (the pipeline's one-bucket run) once per bucket, the
    result dispatching."""
    import polars as pl  # here, not at the top: the CLI names buckets (``describe``) and must not load polars

    plan = buckets(sizes)
    unknown = sorted(set(plan[0]) - program.free_dims)
    if unknown:
        raise InvalidArgument(f"sizes: {program.name} has no dim {unknown[0]!r} (its dims: {sorted(program.free_dims)})")
    progress = options.get("progress")
    results: list[tuple[Ranges, Result]] = []
    for n, ranges in enumerate(plan):
        if progress:
            progress("bucket", n, len(plan), describe(ranges))
        bound = program.bind({d: hi for d, (_, hi) in ranges.items()})
        generic = {d: r for d, r in ranges.items() if r[0] != r[1]}
        results.append((ranges, run(bound, ranges=generic or None, **options)))
    if progress:
        progress("bucket", len(plan), len(plan), "")
    chosen = [(r, res.best, res.bundle) for r, res in results]
    best = BucketedKernel(program.bind({d: hi for d, (_, hi) in plan[-1].items()}), chosen)
    table = pl.concat([res.table.with_columns(pl.lit(describe(r)).alias("bucket")) for r, res in results],
                      how="diagonal_relaxed")
    head = results[-1][1]
    out = Result(best, table, ",".join(res.cache_key for _, res in results), all(res.cache_hit for _, res in results),
                 sum(res.phase1_s for _, res in results), sum(res.phase2_s for _, res in results), head.timed,
                 head.bundle, lambda: head.nugraph,
                 tuple(i for _, res in results for i in res.measured), tuple(i for _, res in results for i in res.reused),
                 tuple(results))
    return out


__all__ = ["BucketedKernel", "buckets", "describe", "optimize", "probe_bindings", "tuned_sizes"]
