"""``saturate_and_extract``: the stages wired together.

Phase 1 (CPU, seconds): the program's νGraph is saturated with the discovered rules, the k best
Candidates (variants x fusion plans x tilings x ISA choices) are enumerated by predicted cost, and
each is emitted as a kernel file; torch eager (and, on a GPU, ``torch.compile(mode=
"max-autotune-no-cudagraphs")``) are added as baselines. Phase 2: the bundle goes to the measurement
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
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import Any

import polars as pl

from axon_eg import validate
from axon_eg.backends.kernel import Kernel, call_signature, check_call, input_specs
from axon_eg.errors import AxonError, KernelCallError
from axon_eg.hw import HardwareSpec, load
from axon_eg.ir.program import Program
from axon_eg.measure import tables

Progress = Callable[[str, int, int, str], None]  # (phase, done, total, detail)
VERDICTS = {"syntax_error": "syntax", "structure_error": "structure", "wrong_result": "correctness",
            "compile_error": "compile", "runtime_error": "run", "timeout": "timeout", "crashed": "crashed",
            "skipped": "budget", "interrupted": "interrupted"}


class PipelineError(AxonError):
    """The program or the request cannot go through the pipeline (unbound dims, unknown target)."""

    table: pl.DataFrame | None = None  # when nothing ran correctly: the run's table, with verdicts


def _version(pkg: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _rules_digest() -> str:
    from axon_eg.rules_discovered.store import DATA

    h = hashlib.sha256()
    for p in sorted(Path(DATA).glob("*.json")):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()[:16]


def toolchain(device: str) -> dict[str, Any]:
    """Versions of everything that can change a measurement, on the measuring side."""
    import axon_eg

    return {"axon_eg": axon_eg.__version__, "rules": _rules_digest(), "torch": _version("torch"),
            "triton": _version("triton"), "python": platform.python_version(), "device": device}


def bundle_key(program: Program, hw: HardwareSpec, target: str, k: int) -> str:
    """What phase 1 depends on: the program (its hash covers shapes and dtypes), the hardware file, k."""
    import axon_eg

    return _sha({"program": program.hash, "inputs": input_specs(program), "hw": hw.name,
                 "hw_file": hashlib.sha256(Path(hw.path).read_bytes()).hexdigest(), "target": target, "k": k,
                 "axon_eg": axon_eg.__version__, "rules": _rules_digest()})[:24]


def cache_key(bkey: str, tools: dict[str, Any]) -> str:
    return _sha({"bundle": bkey, **tools})[:24]


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
    def _fn(self) -> Callable[..., Any]:
        import os

        import torch

        spec = importlib.util.spec_from_file_location(f"axon_eg_best_{self.id}", self.path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # triton.jit reads the function's source through its module
        if not torch.cuda.is_available():  # no GPU: @triton.jit must build interpreted functions (set
            os.environ.setdefault("TRITON_INTERPRET", "1")  # it before triton is first imported to be safe)
        from axon_eg.backends.triton import interpreter

        interpreter.apply()  # under TRITON_INTERPRET=1 only
        spec.loader.exec_module(mod)
        return getattr(mod, self.entry)

    @cached_property
    def _signature(self) -> tuple[tuple[str, tuple[int, ...], Any], ...]:
        """(input name, shape, dtype object) per program input: torch dtypes, NumPy ones for NKI."""
        from axon_eg.ir.dtypes import DTYPES

        if self.mode == "nki":
            import ml_dtypes
            import numpy as np

            kinds = {"bf16": np.dtype(ml_dtypes.bfloat16), "fp16": np.dtype(np.float16), "fp32": np.dtype(np.float32)}
            return tuple((n, s, kinds.get(d or "")) for n, s, d in call_signature(self.program, outputs=False))
        import torch

        return tuple((n, s, getattr(torch, DTYPES[d].torch_name) if d else None)
                     for n, s, d in call_signature(self.program, outputs=False))

    def check(self, inputs: tuple[Any, ...]) -> None:
        """Raise KernelCallError when ``inputs`` do not fit what the kernel was built for (see the class)."""
        if self.mode == "nki":
            import numpy as np

            tensor, layout = np.ndarray, False
        else:
            import torch

            tensor, layout = torch.Tensor, True
        check_call(tuple(inputs), (), self._signature, f"{self.program.name} kernel {self.id}", KernelCallError,
                   tensor, layout)

    def __call__(self, *inputs: Any) -> Any:
        import torch

        self.check(inputs)
        if self.mode == "nki":  # NumPy arrays in and out, through the NKI simulator
            from axon_eg.backends.nki.simulator import simulate

            return simulate(self.source, *inputs, target=self.target, kernel_name=self.entry)
        if self.mode == "return":
            return self._fn(*inputs)
        device = inputs[0].device if inputs else torch.device("cpu")
        outs = [torch.empty(self.program.concrete_shape(o), dtype=getattr(torch, self.program.nodes[o].dtype.torch_name),
                            device=device) for o in self.program.outputs]
        self._fn(*inputs, *outs)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def __repr__(self) -> str:
        return f"BestKernel({self.id!r}, {self.kind}, {self.path})"


SUMMARY_COLUMNS = ("id", "kind", "verdict", "status", "predicted_us", "median_us", "iqr_us", "speedup_vs_eager",
                   "speedup_vs_compile", "max_abs_err", "lowering", "plan")


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
                f"{self.cache_key}; phase 1 {self.phase1_s:.2f} s, phase 2 {self.phase2_s:.2f} s ({len(self.measured)} "
                f"measured, {len(self.reused)} from the cache)\n\n"
                + markdown(self.table.select([c for c in columns if c in self.table.columns])))



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


def _as_program(prog: Any) -> Program:
    program = getattr(prog, "program", prog)
    if not isinstance(program, Program):
        raise PipelineError(f"saturate_and_extract takes a Program (or a Problem), got {type(prog).__name__}")
    unbound = sorted(program.free_dims - set(program.bindings))
    if unbound:
        raise PipelineError(f"{program.name}: dims {unbound} are not bound; call program.bind({unbound[0]}=...) first")
    return program


def _device(device: str | None) -> str:
    if device is not None:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def saturate_and_extract(prog: Any, target: str = "triton", hw: str | HardwareSpec = "h200", k: int = 8,
                         budget_s: float | None = None, *, cache_dir: str | Path | None = None,
                         device: str | None = None, ray_address: str | None = None, rows: str | Path | None = None,
                         saturation_s: float = 2.0, progress: Progress | None = None,
                         force: bool = False) -> Result:
    """Optimize ``prog`` for ``target`` on ``hw``; see the module docstring.

    ``budget_s`` bounds the whole call: saturation gets at most a fifth of it, and candidates are
    measured in predicted order until it is spent (the rest are recorded as not measured).
    ``rows``: a JSON-lines file of measurements made elsewhere on this run's bundle (the remote
    GPU flow: ``write_bundle_only`` here, ``python -m axon_eg.measure BUNDLE --out ROWS`` there).
    ``force`` skips the cache lookup and measures every candidate again; the new rows supersede the old
    (see the module docstring for what a cache hit needs and what a rerun measures)."""
    validate.pipeline_arguments(prog, target, hw, k, budget_s, cache_dir=cache_dir, rows=rows, saturation_s=saturation_s)
    if target not in ("triton", "nki"):
        raise PipelineError(f"target {target!r}: the targets are 'triton' (GPUs) and 'nki' (Trainium)")
    program = _as_program(prog)
    spec = load(hw) if not isinstance(hw, HardwareSpec) else hw
    if (spec.kind == "trainium") != (target == "nki"):
        need = "a Trainium description (trn1, trn2)" if target == "nki" else "a GPU description"
        raise PipelineError(f"hardware {spec.name!r} ({spec.kind}) does not fit target {target!r}: it needs {need}")
    report = progress or (lambda *a: None)
    device = _nki_device(spec) if target == "nki" else _device(device)
    t0 = time.monotonic()
    bkey = bundle_key(program, spec, target, k)
    bdir = tables.cache_dir(cache_dir) / "bundles" / bkey
    imported = _read_rows(rows) if rows is not None else None
    tools = toolchain(device) if imported is None else _row_toolchain(imported, device)
    key = cache_key(bkey, tools)
    sat_s = min(saturation_s, budget_s / 5) if budget_s else saturation_s

    def graph() -> Any:
        return _saturated(program, sat_s)

    if not force:
        hit = _from_cache(key, program, bdir, cache_dir, graph, time.monotonic() - t0)
        if hit is not None:
            report("select", 1, 1, "cache hit")
            return hit
    tables.ensure_writable(cache_dir)  # a read-only cache still serves hits; a miss must write
    final, seen = _observations(key, cache_dir)
    reuse = {} if force else final
    nugraph = None
    if imported is not None:  # phase 2 ran elsewhere on the bundle written by write_bundle_only
        cand_rows = _bundle_candidates(bdir, key)
        ids = {c["id"] for c in cand_rows}
        new_rows = [r for r in imported if r.get("id") in ids]
        if not new_rows:
            raise PipelineError(f"{rows}: none of its rows belong to the bundle {bdir}")
        failures = bdir / "failures.json"  # candidates that failed in phase 1 have no rows from the worker
        new_rows += json.loads(failures.read_text()) if failures.exists() else []
        phase1, phase2 = 0.0, float(sum(r.get("elapsed_s") or 0.0 for r in new_rows))
    else:
        report("saturate", 0, 1, program.name)
        nugraph = graph()
        report("saturate", 1, 1, f"{nugraph.enode_count()} e-nodes")
        kernels, cand_rows = _phase1(program, nugraph, spec, target, k, key, bdir, device, report)
        phase1 = time.monotonic() - t0
        t1 = time.monotonic()
        built = [kern for kern in kernels if kern.source]
        if target == "nki":  # the NeuronCore when the Neuron toolchain is installed, else the NumPy simulator
            from axon_eg.backends.nki.measure import measure_kernels

            todo = [kern for kern in built if kern.name not in reuse]
            report("measure", 0, len(todo), "NKI")
            new_rows = measure_kernels(program, todo, spec) if todo else []
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
    result = _select(key, program, bdir, cache_dir, graph, phase1, phase2, hit=False)
    result.measured = tuple(sorted({r["id"] for r in fresh if r["id"] in meta}))
    result.reused = tuple(sorted(set(meta) - set(result.measured)))
    if nugraph is not None:
        result.__dict__["nugraph"] = nugraph
    report("select", 1, 1, result.best.id)
    return result


def write_bundle_only(prog: Any, target: str = "triton", hw: str | HardwareSpec = "h200", k: int = 8, *,
                      cache_dir: str | Path | None = None, device: str = "cuda", saturation_s: float = 2.0,
                      progress: Progress | None = None) -> Path:
    """Phase 1 only: write the bundle for a remote worker and return its directory."""
    validate.pipeline_arguments(prog, target, hw, k, cache_dir=cache_dir, saturation_s=saturation_s)
    program = _as_program(prog)
    spec = load(hw) if not isinstance(hw, HardwareSpec) else hw
    tables.ensure_writable(cache_dir)
    g = _saturated(program, saturation_s)
    bkey = bundle_key(program, spec, target, k)
    bdir = tables.cache_dir(cache_dir) / "bundles" / bkey
    _phase1(program, g, spec, target, k, "", bdir, device, progress or (lambda *a: None))
    return bdir


def _saturated(program: Program, seconds: float) -> Any:
    """The program's νGraph saturated with the discovered rules for at most ``seconds``."""
    from axon_eg.egraph.nugraph import Limits, NuGraph
    from axon_eg.rules_discovered.store import load_rules

    g = NuGraph(program, load_rules())
    g.saturate(Limits(seconds=seconds))
    return g


def _phase1(program: Program, nugraph: Any, hw: HardwareSpec, target: str, k: int, key: str, bdir: Path, device: str,
            report: Progress) -> tuple[list[Kernel], list[dict[str, Any]]]:
    """Enumerate, emit and bundle; returns the kernels and their ``candidates`` rows."""
    from axon_eg.backends.torch.lower import emit_module
    from axon_eg.bundle import write_bundle
    from axon_eg.extract.candidates import enumerate_candidates

    report("extract", 0, 1, "")
    fallback = None
    if target == "triton":
        from axon_eg.backends.triton.emit import runs_as_torch

        fallback = partial(runs_as_torch, warp_size=int(max(hw.value("knobs.warp_size"))))
    candidates, summary = enumerate_candidates(nugraph, hw, k, fallback=fallback)
    report("extract", 1, 1, f"{len(candidates)} candidates")
    baseline_src = emit_module(program)
    kernels = [Kernel("torch_eager", baseline_src, "eager", "return", "baseline", {}, {"lowering": "torch"})]
    if target == "nki":  # no torch on a NeuronCore here: the candidates compete among themselves
        kernels = []
    elif device != "cpu":  # compiling for the CPU would only time gcc; on a GPU it is the bar to beat
        kernels.append(Kernel("torch_compile", baseline_src, "compiled", "return", "baseline", {},
                              {"lowering": "torch.compile(max-autotune-no-cudagraphs)"}))
    now = _now()
    rows = [{"cache_key": key, "program": program.name, "program_hash": program.hash, "target": target, "hw": hw.name,
             "k": k, "id": b.name, "kind": "baseline", "lowering": b.meta["lowering"], "source": str(bdir / f"{b.name}.py"),
             "timestamp": now} for b in kernels]
    for i, c in enumerate(candidates):
        report("emit", i, len(candidates), "")
        name = f"c{i:02d}_{_sha(list(map(str, c.key)))[:8]}"
        error = summary.errors.get(c.key)
        kern = _failed(target, c, name, "enumerate", error) if error else _emit(target, c, hw, name)
        kernels.append(kern)
        rows.append({"cache_key": key, "program": program.name, "program_hash": program.hash, "target": target,
                     "hw": hw.name, "k": k, "id": kern.name, "kind": "candidate", "variant": c.variant.program.hash[:16],
                     "rank": i, "plan": c.plan.name, "groups": len(c.plan.groups),
                     "tilings": json.dumps([dict(t.values) for t in c.tilings]), "isa": json.dumps(c.isa),
                     "lowering": kern.meta["lowering"], "rules": json.dumps(kern.meta["rules"]),
                     "predicted_us": c.predicted_seconds * 1e6, "source": str(bdir / f"{kern.name}.py") if kern.source else None,
                     "timestamp": now})
    report("emit", len(candidates), len(candidates), "")
    timeouts = {"torch_compile": 600.0}
    if target == "nki":  # run in-process by the simulator: sources and a manifest for the record
        bdir.mkdir(parents=True, exist_ok=True)
        for kern in kernels:
            if kern.source:
                (bdir / f"{kern.name}.py").write_text(kern.source)
        entries = [{"id": kern.name, "entry": kern.entry, "mode": "nki", "source": f"{kern.name}.py"} for kern in kernels]
        (bdir / "manifest.json").write_text(json.dumps({"program": program.name, "hw": hw.name, "candidates": entries}))
    else:
        write_bundle(bdir, program, [kern for kern in kernels if kern.source], hw, timeout_s=120.0, timeouts=timeouts)
    (bdir / "candidates.json").write_text(json.dumps(rows, indent=1))
    (bdir / "failures.json").write_text(json.dumps(_emit_failures(kernels), indent=1))  # for rows measured elsewhere
    return kernels, rows


def _emit(target: str, candidate: Any, hw: HardwareSpec, name: str) -> Kernel:
    """The backend's kernel for a candidate. One the backend fails on (an NKI candidate no lowering
    handles, any exception of an emitter) becomes an empty kernel whose ``meta`` says why (``_failed``)."""
    from axon_eg.extract.candidates import error_line

    try:
        if target == "triton":
            from axon_eg.backends.triton.emit import emit

            return emit(candidate, hw, name)
        from axon_eg.backends.nki.emit import NotLowerable
        from axon_eg.backends.nki.emit import emit as emit_nki

        try:
            return emit_nki(candidate, hw, name)
        except NotLowerable as exc:
            return _failed(target, candidate, name, "emit", str(exc))
    except Exception as exc:  # a bug in one lowering rejects its candidate, never the run
        return _failed(target, candidate, name, "emit", error_line(exc))


def _failed(target: str, candidate: Any, name: str, stage: str, error: str) -> Kernel:
    """The empty kernel of a candidate that failed at ``stage`` (enumerate or emit): recorded as a compile
    error with ``error``, never measured nor selected."""
    return Kernel(name, "", name, "nki" if target == "nki" else "dps", "candidate", {},
                  {"lowering": "none", "rules": list(candidate.variant.rules), "error": error, "stage": stage})


def _nki_device(spec: HardwareSpec) -> str:
    from axon_eg.backends.nki.measure import device_module

    return f"{'measured' if device_module(spec) is not None else 'simulated'}-{spec.name}"


def _emit_failures(kernels: list[Kernel]) -> list[dict[str, Any]]:
    """One ``measurements`` row per kernel that failed before it had a source (``_failed``)."""
    return [{"id": k.name, "kind": k.kind, "status": "compile_error", "stage": k.meta.get("stage", "emit"),
             "error": k.meta.get("error"), "timestamp": _now()} for k in kernels if not k.source]


def _bundle_candidates(bdir: Path, key: str) -> list[dict[str, Any]]:
    path = bdir / "candidates.json"
    if not path.exists():
        raise PipelineError(f"no bundle at {bdir}: write it first with `axon-eg optimize TARGET --bundle-only` "
                            "(same program, sizes, hardware and k)")
    rows = json.loads(path.read_text())
    for r in rows:
        r.update(cache_key=key, source=str(bdir / Path(r["source"]).name) if r.get("source") else None)
    return rows


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
    from axon_eg.measure.worker import interrupt_guard, read_rows, run_bundle

    out = bdir / f"rows-{key}.jsonl"
    ids = [k.name for k in kernels]
    keep = {i: r for i, r in reuse.items() if i in ids}
    resumed: set[str] = set()
    if force:
        out.unlink(missing_ok=True)
    else:
        for r in read_rows(out):
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
        from axon_eg.measure.ray_runner import run_bundle_ray

        report("measure", 0, len(todo), f"ray {ray_address}")
        fresh = run_bundle_ray(bdir, out, ray_address) if todo else []
    else:
        with interrupt_guard(bdir, out):  # SIGINT / SIGTERM between two candidates too: children killed, one line
            for n, cid in enumerate(todo):
                if budget_s is not None and time.monotonic() - t0 > budget_s:
                    fresh.append({"id": cid, "status": "skipped", "stage": "budget", "timestamp": _now(),
                                  "error": f"not measured: the {budget_s:g} s budget was spent"})
                    continue
                report("measure", n, len(todo), cid)
                fresh += run_bundle(bdir, out, gpus=gpus, ids=[cid])
        report("measure", len(todo), len(todo), "")
    wanted = set(todo)
    return [keep[i] for i in ids if i in resumed] + [r for r in fresh if r.get("id") in wanted]


def _read_rows(path: str | Path) -> list[dict[str, Any]]:
    from axon_eg.measure.worker import read_rows

    got = read_rows(path)
    if not got:
        raise PipelineError(f"{path}: no measurement rows")
    return got


def _row_toolchain(rows: list[dict[str, Any]], device: str) -> dict[str, Any]:
    tools = toolchain(device)
    first = rows[0]
    tools.update(torch=first.get("torch_version"), triton=first.get("triton_version"),
                 python=first.get("python_version"), device=str(first.get("device", device)).split(" ")[0])
    return tools


def _latest(key: str, cache_dir: Any) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The run's candidate set (its newest phase 1) and each candidate's newest observation (rows not superseded)."""
    current = (pl.col("cache_key") == key) & ~pl.col("superseded")
    cands = tables.results(cache_dir, "candidates").filter(current).drop("superseded").collect()
    meas = tables.results(cache_dir).filter(current).drop("superseded").collect()
    return cands, meas


def _observations(key: str, cache_dir: Any) -> tuple[dict[str, dict[str, Any]], set[tuple[str, str]]]:
    """(id -> newest observation when it is final, every (id, timestamp) of the key's rows)."""
    rows = tables.read("measurements", cache_dir).filter(pl.col("cache_key") == key)
    meas = tables.with_derived(rows).collect()
    final = {r["id"]: r for r in meas.filter(~pl.col("superseded") & pl.col("final")).iter_rows(named=True)}
    return final, set(zip(meas["id"], meas["timestamp"].fill_null("")))


def _from_cache(key: str, program: Program, bdir: Path, cache_dir: Any, graph: Callable[[], Any],
                phase1: float) -> Result | None:
    """The stored choice when every candidate of the run has a final observation (module docstring), else None."""
    cands, meas = _latest(key, cache_dir)
    if cands.is_empty() or not (bdir / "manifest.json").exists():
        return None
    if not set(cands["id"]) <= set(meas.filter(pl.col("final"))["id"]):
        return None
    if not all(Path(p).exists() for p in cands["source"].drop_nulls()):
        return None
    result = _select(key, program, bdir, cache_dir, graph, phase1, 0.0, hit=True)
    result.reused = tuple(sorted(cands["id"]))
    return result


def choose(cands: pl.DataFrame, meas: pl.DataFrame) -> tuple[pl.DataFrame, str | None, bool]:
    """The selection over one run's candidates and their newest observations: (the joined table with
    ``verdict`` and speedups, the selected id or None, whether latencies were measured); see the module
    docstring (the fastest correct kernel, else on the CPU the correct candidate predicted fastest)."""
    keep = [c for c in meas.columns if c not in cands.columns or c == "id"]
    df = cands.join(meas.select(keep), on="id", how="left").sort(["kind", "rank"], nulls_last=True)
    timed = df.filter((pl.col("status") == "ok") & pl.col("median_us").is_not_null()).height > 0
    ok = df.filter(pl.col("status") == "ok")
    base = ok.filter(pl.col("kind") == "baseline")
    timed_base = df.filter((pl.col("kind") == "baseline") & pl.col("median_us").is_not_null())  # ok or not
    eager = timed_base.filter(pl.col("id") == "torch_eager")["median_us"].first() if timed else None
    comp = timed_base.filter(pl.col("id") == "torch_compile")["median_us"].first() if timed else None
    if timed:
        bar = timed_base["median_us"].min()
        best_id = ok.sort("median_us", nulls_last=True, maintain_order=True)["id"][0]
    else:
        bar = None
        cand_ok = ok.filter(pl.col("kind") == "candidate").sort("predicted_us", maintain_order=True)
        best_id = cand_ok["id"][0] if cand_ok.height else (base["id"][0] if base.height else None)
    verdict = (
        pl.when(pl.col("id").eq_missing(pl.lit(best_id, dtype=pl.Utf8))).then(pl.lit("selected"))
        .when(pl.col("status").is_null()).then(pl.lit("not measured"))
        .when(pl.col("status") != "ok").then(pl.col("status").replace(VERDICTS))
        .when(pl.lit(bar is not None) & (pl.col("kind") == "candidate") & (pl.col("median_us") > (bar or 0.0)))
        .then(pl.lit("performance"))
        .otherwise(pl.lit("slower" if timed else "correct"))
    )
    df = df.with_columns(
        verdict.alias("verdict"),
        (pl.lit(eager) / pl.col("median_us")).alias("speedup_vs_eager"),
        (pl.lit(comp) / pl.col("median_us")).alias("speedup_vs_compile"),
    )
    return df, best_id, timed


def _select(key: str, program: Program, bdir: Path, cache_dir: Any, graph: Callable[[], Any], phase1: float,
            phase2: float, hit: bool) -> Result:
    df, best_id, timed = choose(*_latest(key, cache_dir))
    if best_id is None:
        errors = df["error"].drop_nulls() if "error" in df.columns else []
        first = f"; the first error: {str(errors[0]).strip().splitlines()[-1]}" if len(errors) else ""
        err = PipelineError(f"{program.name}: no candidate and no baseline ran correctly; see the table "
                            f"(cache key {key}, bundle {bdir}){first}")
        err.table = df
        raise err
    row = df.filter(pl.col("id") == best_id).row(0, named=True)
    entry = next((c["entry"] for c in _manifest(bdir) if c["id"] == best_id), "kernel")
    mode = next((c.get("mode", "dps") for c in _manifest(bdir) if c["id"] == best_id), "dps")
    best = BestKernel(best_id, row["kind"], Path(row["source"]), entry, mode, program, str(row.get("hw") or ""))
    return Result(best, df, key, hit, phase1, phase2, timed, bdir, graph)


def _manifest(bdir: Path) -> list[dict[str, Any]]:
    return json.loads((bdir / "manifest.json").read_text())["candidates"]
