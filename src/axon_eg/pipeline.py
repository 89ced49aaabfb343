"""``saturate_and_extract``: the stages wired together.

Phase 1 (CPU, seconds): the program's νGraph is saturated with the discovered rules (an e-node budget
scaled by the program's size, ``saturation.saturation_nodes``; the seconds only a safety cap), the k best
Candidates (variants x fusion plans x tilings x ISA choices, within the enumeration's count budgets,
``extract.candidates.Budget``) are enumerated by predicted cost, and each is emitted as a kernel file
(``_phase1``; identical regions of a model share one saturation and enumeration, ``_enumerated``; the
bundle's ``phase1.json`` says where the time went); torch eager (and, on a GPU, ``torch.compile(mode=
"max-autotune-no-cudagraphs")`` and ``torch.compile`` in its default mode) are added as baselines.
Phase 2: the bundle goes to the measurement
worker (child process per candidate; locally, on every visible GPU, or on a Ray cluster), which runs
the verification cascade syntax -> structure -> correctness -> timing. Selection then rejects
correct candidates slower than the best baseline (the performance stage) and returns the fastest
correct kernel; on a machine without a GPU (Triton interpreter, correctness only) the correct
candidate with the lowest predicted cost is chosen.

Everything observed lands in the Polars tables (``candidates``, ``measurements``) under the cache
directory (see :mod:`axon_eg.measure.tables`); the cache key is the program hash + input shapes and
dtypes + hardware file + target + k + toolchain versions (axon_eg, the rule store, torch, triton,
python, device).

Cache semantics. A run's candidate set is its key's newest phase 1 (the ``candidates`` rows not
superseded); each candidate's observation is its newest ``measurements`` row (not superseded). A call
is a cache hit, measuring nothing, when every candidate's observation is final (deterministic for this
source + toolchain: ok, syntax, structure, compile errors, wrong results; ``tables.is_final``) and the
bundle is still there. Otherwise phase 1 runs again and phase 2 measures exactly the candidates without
a final observation (crashed, timed out, skipped by the budget, interrupted, failed in the environment,
or never measured), reusing the final ones; the worker's resume file ``<bundle>/rows-<key>.jsonl`` is
rewritten to hold just those, and rows a killed call left in it are appended once. ``force=True``
measures every candidate again (the resume file starts over); the new rows supersede the old ones,
which stay in the append-only ``measurements`` log. ``Result.table``, the selection and ``axon-eg cache
ls`` use only rows that are not superseded, so nothing is counted twice.

This module holds the phases; the target's facts and code generator come through its
:class:`~axon_eg.backends.base.Backend` (:func:`~axon_eg.backends.base.backend_for`), the keys and cache
reads from :mod:`axon_eg.cache`, the selection from :mod:`axon_eg.selection`, the returned
:class:`~axon_eg.result.Result` from :mod:`axon_eg.result` (all re-exported here).
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from axon_eg import buckets, validate
from axon_eg.backends.base import TARGETS, Backend
from axon_eg.backends.kernel import Kernel
from axon_eg.cache import (
    bundle_candidates,
    bundle_key,
    cache_key,
    kernel_name,
    observations,
    read_rows,
    row_toolchain,
    toolchain,
)
from axon_eg.errors import InvalidArgument
from axon_eg.hw import DEFAULT_HW, HardwareSpec, load
from axon_eg.ir.program import Program, canonical_inputs
from axon_eg.measure import ray_runner, tables, worker
from axon_eg.measure.interrupts import phase_one
from axon_eg.result import PipelineError, Result
from axon_eg.saturation import compute_ops, saturated, saturation_nodes
from axon_eg.selection import from_cache, select
from axon_eg.targets import backend_for

Progress = Callable[[str, int, int, str], None]  # (phase, done, total, detail)


def _as_program(prog: Any) -> Program:
    program = getattr(prog, "program", prog)
    if not isinstance(program, Program):
        raise PipelineError(f"saturate_and_extract takes a Program (or a Problem), got {type(prog).__name__}")
    unbound = sorted(program.free_dims - set(program.bindings))
    if unbound:
        raise PipelineError(f"{program.name}: dims {unbound} are not bound; call program.bind({unbound[0]}=...) first")
    return program


def _backend(target: str) -> Backend:
    """The target's backend; PipelineError for an unknown target."""
    if target not in TARGETS:
        raise PipelineError(f"target {target!r}: the targets are 'triton' (GPUs) and 'nki' (Trainium)")
    return backend_for(target)


def _baselines(backend: Backend, program: Program, baselines: Sequence[str] | None) -> None:
    """InvalidArgument naming a baseline id the backend does not have."""
    if baselines is None:
        return
    if isinstance(baselines, str):
        raise InvalidArgument(f"baselines: a list of baseline ids, got the string {baselines!r}")
    known = [b.name for b in backend.baselines(program, "cuda")] if backend.torch_baselines else []
    unknown = [b for b in baselines if b not in known]
    if unknown:
        raise InvalidArgument(f"baselines: {unknown[0]!r} is not a baseline of target {backend.name!r} "
                              f"(its baselines: {', '.join(known) or 'none'})")


def _fits(backend: Backend, spec: HardwareSpec) -> None:
    """PipelineError when ``spec`` is hardware the backend does not generate code for."""
    if not backend.accepts(spec):
        raise PipelineError(f"hardware {spec.name!r} ({spec.kind}) does not fit target {backend.name!r}: it needs "
                            f"{backend.needs}")


@dataclass(frozen=True)
class Run:
    """One run specification, built once (:meth:`Run.of`) and handed to the pipeline's public phases
    (:func:`saturate_and_extract`, :func:`write_bundle_only`, :func:`bundle_path`, :func:`phase1_done`): the
    program (bound), the target's backend and hardware description, the candidate count, the fp32 matmul
    precision policy, the shape bucket (``ranges``), the baselines measured, the saturation cap, the cache
    directory and the bundle key. The CLI, the Python API, shape buckets, the dynamo backend and the
    Triton-to-Triton flow build theirs through :meth:`of`, so every check and key is made in one place."""

    program: Program
    backend: Backend
    hw: HardwareSpec
    k: int
    precision: str
    ranges: dict[str, tuple[int, int]] | None
    baselines: tuple[str, ...] | None
    saturation_s: float
    cache_dir: str | Path | None
    key: str
    """The bundle key (``cache.bundle_key``): program, hardware, target, k, precision and ranges."""

    @property
    def target(self) -> str:
        return self.backend.name

    @property
    def bundle_dir(self) -> Path:
        """Where phase 1 writes this run's bundle (and phase 2's rows are looked for)."""
        return tables.cache_dir(self.cache_dir) / "bundles" / self.key

    @classmethod
    def of(cls, prog: Any, target: str = "triton", hw: str | HardwareSpec = DEFAULT_HW, k: int = 8, *,
           cache_dir: str | Path | None = None, precision: str | None = None,
           ranges: dict[str, tuple[int, int]] | None = None, baselines: Sequence[str] | None = None,
           saturation_s: float = 2.0, budget_s: float | None = None, rows: str | Path | None = None,
           checked: bool = True) -> Run:
        """The run's specification, every argument checked first (one line naming the bad one; ``budget_s``
        and ``rows`` are only checked here, the call that uses them keeps them). ``checked=False`` skips the
        checks a run needs before work but a key does not (``bundle_path``: no work, nothing written)."""
        if checked:
            validate.pipeline_arguments(prog, target, hw, k, budget_s, cache_dir=cache_dir, rows=rows,
                                        saturation_s=saturation_s)
        policy = validate.precision(precision)
        program = _as_program(prog)
        spec = load(hw) if not isinstance(hw, HardwareSpec) else hw
        if checked:
            backend = _backend(target)
            _baselines(backend, program, baselines)
            _fits(backend, spec)
        else:
            backend = backend_for(target)
        bucket = validate.ranges(program, ranges)
        return cls(program, backend, spec, k, policy, bucket, None if baselines is None else tuple(baselines),
                   saturation_s, cache_dir, bundle_key(program, spec, target, k, policy, bucket))


_STAGES = {"start": "setup", "saturate": "saturation", "extract": "extraction", "emit": "emission",
           "measure": "in-process measurement", "select": "selection"}
"""What each progress stage is called in the one line a Ctrl-C prints."""


def _one_line_on_ctrl_c(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (which reports its stages through ``progress=``) with Ctrl-C outside phase 2's guard raising
    :class:`~axon_eg.measure.interrupts.PhaseOneInterrupted`: one line naming the program and the stage, no
    traceback when uncaught (phase 2's own :class:`Interrupted` passes through)."""
    @functools.wraps(fn)
    def run(prog: Any, *args: Any, **kwargs: Any) -> Any:
        name = getattr(getattr(prog, "program", prog), "name", type(prog).__name__)
        stage, given = ["start"], kwargs.get("progress")

        def progress(what: str, *rest: Any) -> None:
            stage[0] = what
            if given is not None:
                given(what, *rest)

        with phase_one(name, lambda: _STAGES.get(stage[0], stage[0])):
            return fn(prog, *args, **{**kwargs, "progress": progress})

    return run


@_one_line_on_ctrl_c
def saturate_and_extract(prog: Any, target: str = "triton", hw: str | HardwareSpec = DEFAULT_HW, k: int = 8,
                         budget_s: float | None = None, *, cache_dir: str | Path | None = None,
                         device: str | None = None, ray_address: str | None = None, rows: str | Path | None = None,
                         saturation_s: float = 2.0, progress: Progress | None = None,
                         force: bool = False, precision: str | None = None,
                         sizes: Any = None, ranges: dict[str, tuple[int, int]] | None = None,
                         baselines: Sequence[str] | None = None) -> Result:
    """Optimize ``prog`` for ``target`` on ``hw``; see the module docstring. ``prog`` may be a :class:`Run`
    (a run specification built once): then it carries the target, hardware, k, cache directory, precision,
    ranges, baselines and saturation cap, and those arguments here are not read.

    ``budget_s`` bounds the whole call: saturation gets at most a fifth of it, and candidates are
    measured in predicted order until it is spent (the rest are recorded as not measured).
    ``rows``: a JSON-lines file of measurements made elsewhere on this run's bundle (the remote
    GPU flow: ``write_bundle_only`` here, ``python -m axon_eg.measure BUNDLE --out ROWS`` there).
    ``force`` skips the cache lookup and measures every candidate again; the new rows supersede the old
    (see the module docstring for what a cache hit needs and what a rerun measures). ``precision`` is the
    fp32 matmul policy: ``"ieee"``, ``"tf32"``, or None to follow torch's
    ``torch.backends.cuda.matmul.allow_tf32`` (off by default); it is part of the cache key and stated in
    every kernel header.

    ``sizes`` optimizes for shape buckets (``axon_eg.buckets``): the sizes to tune at per dim (``{"M": [1, 16,
    128]}``) or a range per dim (``{"M": (1, 16384)}``, powers-of-two buckets); the result's ``best``
    dispatches each call to the best kernel of the bucket its sizes fall in and raises outside them.
    ``ranges`` (one bucket: dim -> inclusive (low, high), holding the program's bound sizes) makes every
    candidate shape-generic over it (candidates that cannot be are recorded with the failing guard).
    ``baselines``: the ids of the backend's torch baselines to measure (None: all; Triton's are
    ``torch_eager``, ``torch_compile`` and ``torch_compile_default``), e.g. only ``("torch_eager",)`` where
    nothing but eager code can stand in for the kernel (the dynamo backend's regions)."""
    if sizes is not None:
        program = getattr(prog, "program", prog)
        if not isinstance(program, Program):
            raise PipelineError(f"saturate_and_extract takes a Program (or a Problem), got {type(prog).__name__}")
        return buckets.optimize(program, sizes, saturate_and_extract, target=target, hw=hw, k=k, budget_s=budget_s,
                                cache_dir=cache_dir, device=device, ray_address=ray_address,
                                saturation_s=saturation_s, progress=progress, force=force, precision=precision,
                                baselines=baselines)
    run = prog if isinstance(prog, Run) else Run.of(
        prog, target, hw, k, cache_dir=cache_dir, precision=precision, ranges=ranges, baselines=baselines,
        saturation_s=saturation_s, budget_s=budget_s, rows=rows)
    if isinstance(prog, Run):
        validate.pipeline_arguments(run.program, run.target, run.hw, run.k, budget_s, cache_dir=run.cache_dir,
                                    rows=rows, saturation_s=run.saturation_s)
    program, backend, spec, k, precision, ranges = run.program, run.backend, run.hw, run.k, run.precision, run.ranges
    target, cache_dir, saturation_s, baselines = run.target, run.cache_dir, run.saturation_s, run.baselines
    report = progress or (lambda *a: None)
    device = backend.device(spec, device)
    t0 = time.monotonic()
    bdir = run.bundle_dir
    imported = _own_rows(read_rows(rows), rows, bdir, program) if rows is not None else None
    tools = toolchain(device) if imported is None else row_toolchain(imported, toolchain(device), device)
    key = cache_key(run.key, tools)
    sat_s = min(saturation_s, budget_s / 5) if budget_s else saturation_s

    def graph() -> Any:
        return saturated(program, sat_s)

    if not force:
        hit = from_cache(key, program, bdir, cache_dir, graph, time.monotonic() - t0)
        if hit is not None:
            hit.stages = phase1_stages(bdir) or {}
            report("select", 1, 1, "cache hit")
            return hit
    tables.ensure_writable(cache_dir)  # a read-only cache still serves hits; a miss must write
    final, seen = observations(key, cache_dir)
    reuse = {} if force else final
    if imported is not None:  # phase 2 ran elsewhere on the bundle written by write_bundle_only
        cand_rows = bundle_candidates(bdir, key)
        ids = {c["id"] for c in cand_rows}
        new_rows = [r for r in imported if r.get("id") in ids]
        if not new_rows:
            raise PipelineError(f"{rows}: none of its rows belong to the bundle {bdir}")
        failures = bdir / "failures.json"  # candidates that failed in phase 1 have no rows from the worker
        new_rows += json.loads(failures.read_text()) if failures.exists() else []
        phase1, phase2 = 0.0, float(sum(r.get("elapsed_s") or 0.0 for r in new_rows))
    else:
        kernels, cand_rows = _phase1(program, sat_s, spec, backend, k, key, bdir, device, report, precision, ranges,
                                     lambda p: saturated(p, sat_s), baselines)
        phase1 = time.monotonic() - t0
        t1 = time.monotonic()
        built = [kern for kern in kernels if kern.source]
        if backend.measures_in_process():  # NKI: the NeuronCore with the Neuron toolchain, else the simulator
            todo = [kern for kern in built if kern.name not in reuse]
            report("measure", 0, len(todo), backend.name.upper())
            new_rows = backend.measure(program, todo, spec) if todo else []
            report("measure", len(todo), len(todo), "")
        else:
            new_rows = _measure(bdir, key, built, device, ray_address, budget_s, t0, report, reuse, force)
        new_rows += [r for r in _emit_failures(kernels) if r["id"] not in reuse]
        phase2 = time.monotonic() - t1
    meta = {c["id"]: c for c in cand_rows}
    for r in new_rows:
        r.update(cache_key=key, program=program.name, hw=spec.name, target=target,
                 kind=meta.get(r["id"], {}).get("kind"), predicted_us=meta.get(r["id"], {}).get("predicted_us"))
        r["timestamp"] = r.get("timestamp") or _now()
    tables.append("candidates", cand_rows, cache_dir)
    fresh = [r for r in new_rows if (r["id"], r["timestamp"]) not in seen]  # rows already in the table: once
    if fresh:
        tables.append("measurements", fresh, cache_dir)
    result = select(key, program, bdir, cache_dir, graph, phase1, phase2, hit=False)
    result.measured = tuple(sorted({r["id"] for r in fresh if r["id"] in meta}))
    result.reused = tuple(sorted(set(meta) - set(result.measured)))
    result.stages = phase1_stages(bdir) or {}
    report("select", 1, 1, result.best.id)
    return result


def _own_rows(imported: list[dict[str, Any]], path: str | Path, bdir: Path, program: Program) -> list[dict[str, Any]]:
    """``imported`` when every row was measured from this run's bundle (the worker copies the bundle's key, its
    directory's name, from the manifest into each row), else PipelineError naming the rows' bundle and program:
    another program's rows (its baseline ids are the same) must never be stored under this run's key."""
    for row in imported:
        got = row.get("bundle")
        if got == bdir.name:
            continue
        if got is None:
            raise PipelineError(f"{path}: row {row.get('id')!r} carries no bundle key (measured by an older axon_eg "
                                f"worker): write the bundle again (--bundle-only), measure it, and pass its rows")
        raise PipelineError(f"{path}: its rows were measured on bundle {got} (program {row.get('program')!r}), not on this "
                            f"run's bundle {bdir.name} (program {program.name!r}): measure {bdir} and pass its rows")
    return imported


@_one_line_on_ctrl_c
def write_bundle_only(prog: Any, target: str = "triton", hw: str | HardwareSpec = DEFAULT_HW, k: int = 8, *,
                      cache_dir: str | Path | None = None, device: str = "cuda", saturation_s: float = 2.0,
                      progress: Progress | None = None, precision: str | None = None,
                      ranges: dict[str, tuple[int, int]] | None = None,
                      baselines: Sequence[str] | None = None) -> Path:
    """Phase 1 only: write the bundle for a remote worker and return its directory (``prog`` a program or a
    :class:`Run`; ``precision``, ``ranges`` and ``baselines`` as in :func:`saturate_and_extract`);
    :func:`bundle_path` says where it goes without writing it. A bundle whose phase 1 completed for the same
    device, baselines and saturation cap, its saturation not cut by the clock, is returned as it is: phase 1
    would write the same bundle again (``phase1_done``; a rebuild of a model before its bundles are measured
    skips phase 1)."""
    run = prog if isinstance(prog, Run) else Run.of(
        prog, target, hw, k, cache_dir=cache_dir, precision=precision, ranges=ranges, baselines=baselines,
        saturation_s=saturation_s)
    tables.ensure_writable(run.cache_dir)
    bdir = run.bundle_dir
    if phase1_done(run, device):
        return bdir
    _phase1(run.program, run.saturation_s, run.hw, run.backend, run.k, "", bdir, device,
            progress or (lambda *a: None), run.precision, run.ranges, lambda p: saturated(p, run.saturation_s),
            run.baselines)
    return bdir


def phase1_done(run: Run, device: str) -> bool:
    """Whether the run's bundle holds a complete phase 1 (its ``phase1.json`` is written last) made for this
    device (the baselines differ on a GPU), the run's baselines and saturation cap, and reproducible (not
    clock-limited): phase 1 would write the same bundle again."""
    bdir, baselines, saturation_s = run.bundle_dir, run.baselines, run.saturation_s
    done = phase1_stages(bdir)
    if done is None or not (bdir / "manifest.json").is_file() or not (bdir / "candidates.json").is_file():
        return False
    return (done.get("device") == device and done.get("baselines") == (None if baselines is None else list(baselines))
            and done.get("saturation_cap_s") == saturation_s
            and not (done.get("saturation") or {}).get("clock_limited", True))


def bundle_path(prog: Any, target: str = "triton", hw: str | HardwareSpec = DEFAULT_HW, k: int = 8, *,
                cache_dir: str | Path | None = None, precision: str | None = None,
                ranges: dict[str, tuple[int, int]] | None = None) -> Path:
    """The directory :func:`write_bundle_only` writes for these arguments (and :func:`saturate_and_extract`
    reads measurements made elsewhere from), without any work: no saturation, nothing written."""
    if isinstance(prog, Run):
        return prog.bundle_dir
    return Run.of(prog, target, hw, k, cache_dir=cache_dir, precision=precision, ranges=ranges,
                  checked=False).bundle_dir


_MEMO: dict[tuple, tuple[list[Any], Any, dict[str, Any]]] = {}
MEMO_SIZE = 64
"""Phase 1's enumerations kept per process (the oldest dropped first): see ``_enumerated``."""


def _enumerated(program: Program, saturation_s: float, hw: HardwareSpec, backend: Backend, k: int, precision: str,
                cache_root: Path, report: Progress) -> tuple[list[Any], Any, dict[str, Any]]:
    """The program's candidates and enumeration summary (``enumerate_candidates``), and what it took.

    Phase 1 runs on the program with its inputs named by position (``ir.program.canonical_inputs``) and the
    candidates are renamed back (``candidates.renamed``): the same blocks of a model (a transformer's layers,
    their regions differing only in their parameters' names) give equal canonical programs, and one phase 1
    serves them all, kept per process and cache directory (``_MEMO``, ``MEMO_SIZE``): a region served from it
    records ``"reused": True`` and no saturation or extraction seconds. The result does not depend on which
    region came first: every one is the canonical program's, renamed."""
    extraction = _extraction()
    canon, names = canonical_inputs(program)
    key = (str(cache_root.resolve()), canon.hash, hw.name, str(hw.path), _file_digest(hw.path), backend.name, k,
           precision, saturation_s)
    hit = _MEMO.get(key)
    stages: dict[str, Any]
    if hit is None:
        report("saturate", 0, 1, program.name)
        started = time.monotonic()
        g = saturated(canon, saturation_s)
        saturation_wall = time.monotonic() - started
        sat = g.report
        report("saturate", 1, 1, f"{sat.enodes} e-nodes")
        report("extract", 0, 1, "")
        started = time.monotonic()
        found, summary = extraction.enumerate_candidates(g, hw, k, backend=backend, fallback=backend.fallback(hw),
                                                         precision=precision)
        stages = {"saturation_s": saturation_wall, "extraction_s": time.monotonic() - started, "enodes": sat.enodes,
                  "saturation": {"iterations": sat.iterations, "enodes": sat.enodes, "stop_reason": sat.stop_reason,
                                 "node_budget": saturation_nodes(canon),
                                 "clock_limited": sat.stop_reason == "time limit"},
                  "enumeration": summary.counts(), "reused": False}
        for c in found:  # the plans' group-cost memos (every tiling ranked) are not kept with them
            c.plan.__dict__.pop("memo", None)
        _MEMO[key] = (found, summary, stages)
        while len(_MEMO) > MEMO_SIZE:
            del _MEMO[next(iter(_MEMO))]
    else:
        report("extract", 0, 1, "")
        found, summary, first = hit
        stages = {**first, "saturation_s": 0.0, "extraction_s": 0.0, "reused": True}
    out = [extraction.renamed(c, names, program.name) for c in found]
    keys = {c.key: r.key for c, r in zip(found, out)}
    summary = replace(summary, errors={keys.get(key, key): e for key, e in summary.errors.items()})
    return out, summary, stages


def _extraction() -> Any:
    """:mod:`axon_eg.extract.candidates` (enumerating and renaming candidates, wording an emitter's error), imported
    when phase 1 first runs."""
    from axon_eg.extract import candidates  # lazy: loads egglog; a cache hit, a selection, bundle_path need no e-graph

    return candidates


@functools.cache
def _file_digest(path: Path) -> str:
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _phase1(program: Program, saturation_s: float, hw: HardwareSpec, backend: Backend, k: int, key: str, bdir: Path,
            device: str, report: Progress, precision: str = "ieee",
            ranges: dict[str, tuple[int, int]] | None = None,
            saturate: Callable[[Program], Any] | None = None,
            baselines: Sequence[str] | None = None) -> tuple[list[Kernel], list[dict[str, Any]]]:
    """Saturate (for at most ``saturation_s`` seconds, ``saturation.saturated``), enumerate (``_enumerated``), emit and
    bundle; returns the kernels and their ``candidates`` rows.

    Where phase 1's time went is written to ``<bundle>/phase1.json`` (:data:`PHASE1_FILE`): the seconds of
    saturation, extraction (the enumeration of the candidates) and emission, the νGraph's size and how its
    saturation stopped (``clock_limited``: the seconds cap cut it, so the candidates may differ on another
    machine), the enumeration's counts (``EnumerationSummary.counts``: what its budgets left out), and
    ``reused`` where an identical region's phase 1 served this one (``_enumerated``).

    With ``ranges`` (a shape bucket) every kernel is shape-generic over it and phase 2 also checks and times
    each at the bucket's probe sizes (``buckets.probe_bindings``: its low end and middle). Where phase 2
    times (a GPU), the k candidates the cost model ranks first at each probe size (``saturate`` gives the
    νGraph of the program bound there) join the bucket's too, emitted generic over the whole bucket
    (``tuned_at``); repeats of a kernel already there are dropped (``meta["code_hash"]``)."""
    target = backend.name
    candidates, summary, stages = _enumerated(program, saturation_s, hw, backend, k, precision, bdir.parent.parent,
                                              report)
    probes = buckets.probe_bindings(ranges) if ranges else []
    extra: list[tuple[dict[str, int], Any]] = []
    # without timings at the probes (the CPU; a backend measuring in process, at the tuned size only) there
    # is nothing to choose the extra tilings by
    if probes and saturate is not None and device != "cpu" and not backend.measures_in_process():
        for binding in probes:
            found, why = _extraction().enumerate_candidates(saturate(program.bind(binding)), hw, k, backend=backend,
                                                            fallback=backend.fallback(hw), precision=precision)
            extra += [(binding, c) for c in found if c.key not in why.errors]
    report("extract", 1, 1, f"{len(candidates) + len(extra)} candidates")
    emit_started = time.monotonic()
    kernels = backend.baselines(program, device) if backend.torch_baselines else []
    if baselines is not None:
        kernels = [b for b in kernels if b.name in baselines]
    now = _now()
    rows = [{"cache_key": key, "program": program.name, "program_hash": program.hash, "target": target, "hw": hw.name,
             "k": k, "id": b.name, "kind": "baseline", "lowering": b.meta["lowering"], "source": str(bdir / f"{b.name}.py"),
             "timestamp": now} for b in kernels]

    def row(i: int, c: Any, kern: Kernel) -> dict[str, Any]:
        return {"cache_key": key, "program": program.name, "program_hash": program.hash, "target": target,
                "hw": hw.name, "k": k, "id": kern.name, "kind": "candidate", "variant": c.variant.program.hash[:16],
                "rank": i, "plan": c.plan.name, "groups": len(c.plan.groups),
                "tilings": json.dumps([dict(t.values) for t in c.tilings]), "isa": json.dumps(c.isa),
                "lowering": kern.meta["lowering"], "rules": json.dumps(kern.meta["rules"]),
                "predicted_us": c.predicted_seconds * 1e6,
                "source": str(bdir / f"{kern.name}.py") if kern.source else None, "timestamp": now}

    for i, c in enumerate(candidates):
        report("emit", i, len(candidates), "")
        name = kernel_name(i, c.key)
        error = summary.errors.get(c.key)
        kern = _failed(backend, c, name, "enumerate", error) if error else _emit(backend, c, hw, name, ranges)
        kernels.append(kern)
        rows.append(row(i, c, kern))
    seen = {kern.meta.get("code_hash") for kern in kernels if kern.source}
    for i, (binding, c) in enumerate(extra, start=len(candidates)):
        report("emit", i, len(candidates) + len(extra), "")
        kern = _emit(backend, c, hw, kernel_name(i, c.key), ranges)
        if not kern.source or kern.meta.get("code_hash") in seen:
            continue  # a kernel the tuned size already has, or one not generic over the bucket: not a new choice
        seen.add(kern.meta.get("code_hash"))
        kernels.append(kern)
        rows.append({**row(i, c, kern), "tuned_at": ",".join(f"{d}={v}" for d, v in sorted(binding.items()))})
    report("emit", len(candidates) + len(extra), len(candidates) + len(extra), "")
    backend.write_bundle(bdir, program, kernels, hw, probes=probes)
    (bdir / "candidates.json").write_text(json.dumps(rows, indent=1))
    (bdir / "failures.json").write_text(json.dumps(_emit_failures(kernels), indent=1))  # for rows measured elsewhere
    stages = {"program": program.name, "ops": compute_ops(program), **stages,
              "emission_s": time.monotonic() - emit_started, "enumeration": summary.counts(), "device": device,
              "baselines": None if baselines is None else list(baselines), "saturation_cap_s": saturation_s}
    (bdir / PHASE1_FILE).write_text(json.dumps(stages, indent=1))
    return kernels, rows


PHASE1_FILE = "phase1.json"
"""The bundle's record of where its phase 1 went (``_phase1``): seconds per stage, the enumeration's counts."""


def phase1_stages(bdir: str | Path) -> dict[str, Any] | None:
    """The bundle's ``phase1.json`` (see ``_phase1``), or None where it has none."""
    path = Path(bdir) / PHASE1_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def _emit(backend: Backend, candidate: Any, hw: HardwareSpec, name: str,
          ranges: dict[str, tuple[int, int]] | None = None) -> Kernel:
    """The backend's kernel for a candidate. One the backend fails on (a candidate it cannot lower, any
    exception of an emitter) becomes an empty kernel whose ``meta`` says why (``_failed``)."""
    try:
        try:
            return backend.emit(candidate, hw, name, ranges) if ranges else backend.emit(candidate, hw, name)
        except backend.unlowerable() as exc:
            return _failed(backend, candidate, name, "emit", str(exc))
    except Exception as exc:  # a bug in one lowering rejects its candidate, never the run
        return _failed(backend, candidate, name, "emit", _extraction().error_line(exc))


def _failed(backend: Backend, candidate: Any, name: str, stage: str, error: str) -> Kernel:
    """The empty kernel of a candidate that failed at ``stage`` (enumerate or emit): recorded as a compile
    error with ``error``, never measured nor selected."""
    return Kernel(name, "", name, backend.kernel_mode, "candidate", {},
                  {"lowering": "none", "rules": list(candidate.variant.rules), "error": error, "stage": stage})


def _emit_failures(kernels: list[Kernel]) -> list[dict[str, Any]]:
    """One ``measurements`` row per kernel that failed before it had a source (``_failed``)."""
    return [{"id": k.name, "kind": k.kind, "status": "compile_error", "stage": k.meta.get("stage", "emit"),
             "error": k.meta.get("error"), "timestamp": _now()} for k in kernels if not k.source]


def _now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.UTC).isoformat()


def _measure(bdir: Path, key: str, kernels: list[Kernel], device: str, ray_address: str | None, budget_s: float | None,
             t0: float, report: Progress, reuse: dict[str, dict[str, Any]], force: bool) -> list[dict[str, Any]]:
    """Run the worker over the bundle's kernels that have no final observation (baselines first, then
    candidates in predicted order); returns this call's rows: the new ones, and final rows an earlier,
    killed call left in the resume file. ``reuse`` (id -> final row from the table) is not measured.

    The resume file ``rows-<key>.jsonl`` is rewritten first to hold exactly the final rows kept (the
    worker skips every id it has a row for, so a transient row there would never be retried); ``force``
    starts it over. Under a budget, candidates are started while time remains (the rest are ``skipped``)."""
    out = bdir / f"rows-{key}.jsonl"
    ids = [k.name for k in kernels]
    keep = {i: r for i, r in reuse.items() if i in ids}
    resumed: set[str] = set()
    if force:
        out.unlink(missing_ok=True)
    else:
        for r in worker.read_rows(out):
            i = r.get("id")
            if i in ids and tables.is_final(r.get("status"), r.get("error")) and \
                    (i not in keep or str(r.get("timestamp") or "") >= str(keep[i].get("timestamp") or "")):
                keep[i] = r
                resumed.add(i)
        if keep or out.exists():
            tmp = out.with_name(out.name + ".tmp")
            tmp.write_text("".join(json.dumps({c: r.get(c) for c in tables.SCHEMA}, default=str) + "\n"
                                   for r in keep.values()))
            os.replace(tmp, out)
    todo = [i for i in ids if i not in keep]
    gpus = [] if device == "cpu" else None
    fresh: list[dict[str, Any]] = []
    if ray_address is not None:
        report("measure", 0, len(todo), f"ray {ray_address}")
        fresh = ray_runner.run_bundle_ray(bdir, out, ray_address) if todo else []
    else:
        with worker.interrupt_guard(bdir, out):  # SIGINT / SIGTERM between two candidates too: children killed, one line
            for n, cid in enumerate(todo):
                if budget_s is not None and time.monotonic() - t0 > budget_s:
                    fresh.append({"id": cid, "status": "skipped", "stage": "budget", "timestamp": _now(),
                                  "error": f"not measured: the {budget_s:g} s budget was spent"})
                    continue
                report("measure", n, len(todo), cid)
                fresh += worker.run_bundle(bdir, out, gpus=gpus, ids=[cid])
        report("measure", len(todo), len(todo), "")
    wanted = set(todo)
    return [keep[i] for i in ids if i in resumed] + [r for r in fresh if r.get("id") in wanted]
