"""``torch.compile(model, backend="axon_eg")``: dynamo's graphs through axon_eg, region by region.

The backend (registered under the entry point group ``torch_dynamo_backends``, so the name works after
``pip install``) receives each graph dynamo captures and returns a callable that, at the first call with
a given signature (each tensor's shape, dtype and device, each other argument's value), builds and keeps
that signature's version:

1. the graph is exported to aten (``torch.export``, the training IR the program importer reads: linear,
   softmax, layer norm and attention arrive whole) and unlifted (parameters as attributes);
2. its ``call_function`` nodes that axon_eg imports (``ir.torch_import.SUPPORTED_ATEN_OPS``) are grouped
   into maximal regions (:mod:`axon_eg.partition`, ``CapabilityBasedPartitioner``: a region is convex, so the
   rest of the graph still runs in order around it); a region of views only (``aten.view``, ``aten.transpose``, ...) stays torch;
3. each region becomes a Program (``from_torch`` on the region's submodule, with fake inputs: no tensor
   memory) and goes through ``saturate_and_extract`` with the backend's options (cache first, so a second
   process starts at once); its selected kernel replaces the region, called with contiguous inputs;
4. a region the importer refuses, or whose selection is a baseline, stays in the graph; so do unsupported
   ops between regions. Every region's fate is in :attr:`Compiled.report` (``verbose`` prints it);
5. **the hybrid** (option ``rest="inductor"``, the default): the graph is compiled by Inductor
   (``torch._inductor.compile_fx.compile_fx``, its default mode, what ``torch.compile`` does with a captured
   graph) with each kept region spliced in as an opaque custom op (``torch.ops.axon_eg.<region>_<n>``, its
   fake giving the kernel's output shapes and dtypes: :func:`splice`), so whatever axon_eg does not win
   is Inductor's code, not eager's. ``rest="eager"`` runs it as torch code; so does a version built for
   meta inputs, or one Inductor fails on (a warning, and :attr:`Compiled.rest` says why).

A new signature builds a new version (dynamo's own guards decide when it recompiles the graph; where it
marks a dim dynamic, the sizes still arrive here as values and each distinct one is built once).

Inference only: a call with gradients enabled and a tensor (argument or parameter) that requires them runs
the captured graph as torch code (the backward is torch's), with a one-time warning saying so.

Options (``torch.compile(..., options={...})``, all optional): ``target`` ("triton"), ``hw`` ("h200"),
``k`` (4 candidates per region), ``budget_s``, ``precision``, ``cache_dir``, ``device`` (where phase 2
measures: the local GPU, else the Triton interpreter on the CPU), ``saturation_s``, ``verbose``,
``region_ops`` and ``region_contractions`` (24 and 3: a larger region is cut into runs of at most that many
computing ops and contractions, see :func:`partition`), ``rest`` ("inductor" or "eager": what runs the graph
around the kept regions), ``freeze`` (False; True: the module's parameters and buffers are constant in
inference, never written through ``.data``: what depends on them alone, a norm's gain folded into the next
weight or a transposed weight, is computed once per version of the weights and cached with the kernel, as
Inductor's freezing does), ``remote`` (a directory: phase 2 on another machine's GPU, below). Every option is
checked (:func:`options`): a bad one is an ``InvalidArgument`` naming it, raised by ``ax.optimize`` at its
call and, for ``torch.compile``, at the compiled model's first call (dynamo hands a backend its options only
then), as that error itself.

A call with meta tensors (a model on the meta device) runs the graph as torch code: meta tensors of eager's
shapes and dtypes come out and no kernel runs (with ``remote``, the version is built first: phase 1 needs
shapes only). A graph that cannot be exported (data-dependent control flow, ...) is worded in one line by
``ir.torch_export`` (torch's logging kept out of the terminal): ``ax.optimize`` raises it, the backend warns
and runs the graph as torch code.

A region is measured against what would run in its place when no candidate is faster
(``REGION_BASELINES``): its eager code and, with the hybrid, Inductor's code of the region (``torch.compile``
default mode, compiled alone); a candidate is kept only when it beats every one of them.

**Remote phase 2** (``remote=DIR``; phase 1 here, where egglog and z3 are, the worker on a bare GPU box that
has only torch and triton): the first build writes each region's bundle under ``DIR/bundles`` and runs the
region as torch code (its report line names the bundle). On the GPU box, ``python -m axon_eg.measure
DIR/bundles/*`` writes each bundle's ``rows.jsonl``; with those rows back in ``DIR``, the next build (a new
process, or ``ax.optimize`` again) selects from them, and ``save`` writes the ``ModelNew`` file to run
there; :mod:`axon_eg.model_new` writes it (the model's class, only what it needs of its file).
"""

from __future__ import annotations

import contextlib
import copy
import operator
import os
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import torch

from axon_eg import hw as hardware
from axon_eg import model_new, validate
from axon_eg.errors import AxonError, InvalidArgument, UnsupportedOperation
from axon_eg.hw import DEFAULT_HW
from axon_eg.ir.program import canonical_inputs
from axon_eg.ir.torch_export import _Captured, _export_error
from axon_eg.ir.torch_import import from_torch, import_torch
from axon_eg.measure.worker import ROWS_NAME
from axon_eg.partition import graph_work, moves_no_arithmetic, partition, target
from axon_eg.regions import RegionKernel, drop_asserts, views_as_reshapes
from axon_eg.targets import backend_for

DEFAULTS: dict[str, Any] = {"target": "triton", "hw": DEFAULT_HW, "k": 4, "budget_s": None, "precision": None,
                            "cache_dir": None, "device": None, "saturation_s": 2.0, "verbose": False,
                            "region_ops": 24, "region_contractions": 3, "remote": None, "rest": "inductor",
                            "freeze": False}
"""The backend's options and their defaults."""

RESTS = ("inductor", "eager")
"""What runs the graph around the kept regions (option ``rest``): Inductor (``compile_fx``, the regions spliced in
as opaque custom ops), or eager torch code."""

BACKEND = "torch.compile(backend='axon_eg')"
"""How the backend's errors name where an option was given (``ax.optimize`` names itself)."""


def options(given: Mapping[str, Any] | None, who: str = BACKEND) -> dict[str, Any]:
    """The backend's options with defaults filled in, each checked (InvalidArgument naming ``who`` and the option):
    an unknown one; ``k``, ``region_ops``, ``region_contractions`` integers >= 1; ``budget_s`` None or seconds > 0;
    ``saturation_s`` seconds > 0; ``hw`` a GPU hardware file (a bundled name or a YAML path); ``precision`` None or
    one of ``validate.PRECISIONS``; ``device`` None, ``"cpu"`` or a CUDA device that is here; ``verbose`` a
    bool; ``cache_dir`` and ``remote`` None or a directory path (not a file), not both naming different places;
    ``target`` "triton"."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise InvalidArgument(f"{who}: unknown option {unknown[0]!r} (options: {', '.join(sorted(DEFAULTS))})")
    opts = {**DEFAULTS, **given}

    def named(option: str) -> str:
        return f"{who}: option {option}"

    if opts["rest"] not in RESTS:
        raise InvalidArgument(f"{named('rest')} must be one of {', '.join(map(repr, RESTS))}, got {opts['rest']!r}")
    if opts["target"] != "triton":
        raise InvalidArgument(f"{who}: target {opts['target']!r}: the backend runs Triton kernels on torch tensors (for "
                              "NKI, import with ax.from_torch and call ax.saturate_and_extract(program, target='nki'))")
    for option in ("k", "region_ops", "region_contractions"):
        validate.positive_int(opts[option], named(option))
    if opts["budget_s"] is not None:
        validate.positive_seconds(opts["budget_s"], named("budget_s"))
    validate.positive_seconds(opts["saturation_s"], named("saturation_s"))
    for option in ("verbose", "freeze"):
        if not isinstance(opts[option], bool):
            raise InvalidArgument(f"{named(option)} must be True or False, got {opts[option]!r}")
    if opts["precision"] is not None:
        validate.precision(opts["precision"], named("precision"))
    _check_hw(opts["hw"], who)
    opts["device"] = _check_device(opts["device"], who)
    for option in ("cache_dir", "remote"):
        value = opts[option]
        if value is None:
            continue
        if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
            raise InvalidArgument(f"{named(option)} must be a directory path, got {type(value).__name__} {value!r}")
        validate.directory(value, named(option))  # a PathError (an InvalidArgument) naming it
    if opts["remote"] is not None and opts["cache_dir"] is not None and \
            Path(opts["remote"]).resolve() != Path(opts["cache_dir"]).resolve():
        raise InvalidArgument(f"{who}: remote {str(opts['remote'])!r} and cache_dir {str(opts['cache_dir'])!r}: the remote "
                              "directory is the cache of its regions' runs, give one of the two")
    return opts


def _check_hw(hw: Any, who: str) -> None:
    """``hw``: a hardware file the Triton backend generates code for (InvalidArgument naming ``who``)."""
    triton = backend_for("triton")
    gpus = [t for t in hardware.targets() if triton.accepts(hardware.load(t))]
    if isinstance(hw, str) and hw and os.sep not in hw and "/" not in hw and not hw.endswith((".yaml", ".yml")) \
            and hw not in hardware.targets():
        raise InvalidArgument(f"{who}: option hw {hw!r} is not a known hardware file (Triton's: {', '.join(gpus)}; or "
                              "the path of a YAML file)")
    try:
        validate.hardware(hw, f"{who}: option hw")
        spec = hw if type(hw).__name__ == "HardwareSpec" else hardware.load(hw)
    except InvalidArgument:
        raise
    except AxonError as exc:
        raise InvalidArgument(f"{who}: option hw {hw!r}: {exc}") from None
    if not triton.accepts(spec):
        raise InvalidArgument(f"{who}: option hw {hw!r} describes {spec.kind} hardware; the backend runs Triton kernels, "
                              f"which need {triton.needs} ({', '.join(gpus)})")


def _check_device(device: Any, who: str) -> str | None:
    """``device`` (where phase 2 measures) as a string: None (the local GPU, else the Triton interpreter on the
    CPU), "cpu", or "cuda" / "cuda:N" of a GPU that is here."""
    if device is None:
        return None
    if not isinstance(device, (str, torch.device)):
        raise InvalidArgument(f"{who}: option device must be a device such as 'cuda' or 'cpu', got "
                              f"{type(device).__name__} {device!r}")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise InvalidArgument(f"{who}: option device {device!r} is not a device (e.g. 'cuda', 'cuda:1', 'cpu')") from None
    if dev.type not in ("cpu", "cuda"):
        raise InvalidArgument(f"{who}: option device {device!r}: phase 2 measures on 'cuda' or on 'cpu' (the Triton "
                              "interpreter)")
    if dev.type == "cuda" and (not torch.cuda.is_available() or (dev.index or 0) >= torch.cuda.device_count()):
        have = f"{torch.cuda.device_count()} CUDA device(s)" if torch.cuda.is_available() else "no CUDA device"
        raise InvalidArgument(f"{who}: option device {device!r}: this machine has {have} (leave device unset to measure "
                              "on the local GPU, else under the Triton interpreter)")
    return str(dev)


class OptimizedModule(torch.nn.Module):
    """``ax.optimize(module, example_inputs)``: ``module`` with its regions running axon_eg's kernels (the
    drop-in form of the backend, no dynamo): same ``forward`` arguments, the same parameter objects
    (``module`` is kept as ``.original``). Built for the example inputs' signature at construction; another
    signature builds its version at its first call. Inference only, like the backend."""

    def __init__(self, module: torch.nn.Module, example_inputs: Any, **opts: Any):
        super().__init__()
        self.original = module
        self.compiled = Compiled(module, options(opts, "ax.optimize"), captured=False)
        args = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
        with torch.no_grad():
            key = signature(args)
            self.compiled.versions[key] = self.compiled.build(args, key, strict=True)

    def forward(self, *args: Any) -> Any:
        return self.compiled(*args)

    @property
    def report(self) -> list[Region]:
        """Every region of every version built so far, with its kernel or why it runs as torch code."""
        return [r for regions in self.compiled.report.values() for r in regions]

    def save(self, path: str | Path) -> Path:
        """Write a self-contained Python file (KernelBench's ``ModelNew`` form) that imports torch and triton
        (and what the model's class imports), never axon_eg, and runs nothing but definitions when imported:
        the model's class (its definition and only what it needs of its file, or, for an installed library's
        class such as ``nn.Sequential``, its import and ``get_init_inputs()`` rebuilding the module tree),
        each region's kernel, and ``class ModelNew(<the class>)`` whose ``forward`` runs the graph of the first
        version built through the kernels. ``ModelNew`` is built like the original (same ``__init__``
        arguments, so the same parameters from the same seed; or ``load_state_dict``) and takes inputs of that
        version's shapes. :mod:`axon_eg.model_new` says how the class is extracted."""
        return Path(model_new.write(self, Path(path)))


def write_model_new(optimized: OptimizedModule, path: Path) -> Path:
    """:meth:`OptimizedModule.save` (see there)."""
    return model_new.write(optimized, Path(path))


def optimize(module: torch.nn.Module, example_inputs: Any, **opts: Any) -> OptimizedModule:
    """``module`` optimized for ``example_inputs`` (options as the backend's, e.g. ``k=4, hw="h200"``)."""
    if not isinstance(module, torch.nn.Module):
        raise InvalidArgument(f"optimize takes an nn.Module, got {type(module).__name__}")
    return OptimizedModule(module, example_inputs, **opts)


def backend(gm: torch.fx.GraphModule, example_inputs: list[Any], *, options: Mapping[str, Any] | None = None,
            mode: str | None = None) -> Callable[..., Any]:
    """The dynamo backend: a :class:`Compiled` for the captured graph ``gm`` (see the module docstring).
    ``mode`` (torch.compile's) is accepted and not used.

    The options reach a backend only when dynamo compiles the first frame, inside the compiled model's first
    call, and dynamo wraps what a backend raises in its ``BackendCompilerFailed`` (a traceback through its
    internals) or, for some errors, silently falls back to eager. So a bad option gives a callable that raises
    the ``InvalidArgument`` itself: that first call (and each later one) fails with its one line."""
    try:
        opts = globals()["options"](options)
    except InvalidArgument as exc:
        return _Refused(exc)
    return Compiled(gm, opts)


class _Refused:
    """What the backend returns for options it refuses: each call raises the refusal (its own type and line)."""

    def __init__(self, error: InvalidArgument):
        self.error = error

    def __call__(self, *args: Any) -> Any:
        raise type(self.error)(*self.error.args) from None


@dataclass
class Region:
    """One region of one signature's graph: its ops, and the kernel that runs it or why torch does."""

    name: str
    ops: list[str]
    kernel: str | None = None  # the selected candidate's id
    why_torch: str | None = None  # set when the region runs as torch code
    bundle: str | None = None  # the remote flow: the region's bundle (waiting for its measurements, or measured)
    phase1_s: float | None = None  # the region's phase 1 (saturation, extraction, emission); 0 on a cache hit
    seconds: float | None = None  # all the region took to build: import, phase 1, phase 2 or the cache
    flops: int = 0  # its ops' FLOPs and bytes, op by op (:func:`graph_work`)
    bytes: int = 0

    def line(self) -> str:
        what = f"kernel {self.kernel}" if self.kernel else f"torch ({self.why_torch})"
        took = "" if self.seconds is None else \
            f" [{'' if self.phase1_s is None else f'phase 1 {self.phase1_s:.1f} s, '}{self.seconds:.1f} s in all]"
        return f"{self.name}: {len(self.ops)} ops ({', '.join(_short(o) for o in self.ops[:6])}" \
               f"{', ...' if len(self.ops) > 6 else ''}) -> {what}{took}"


@dataclass
class Compiled:
    """What the backend returns for one captured graph: a version per call signature, built at its first
    call (:meth:`build`), and the report of each version's regions."""

    gm: torch.fx.GraphModule
    opts: dict[str, Any]
    captured: bool = True
    """``gm`` is the graph dynamo captured (the backend); False: the user's module itself (``ax.optimize``)."""
    versions: dict[tuple, Callable[..., Any]] = field(default_factory=dict)
    report: dict[tuple, list[Region]] = field(default_factory=dict)
    graphs: dict[tuple, torch.fx.GraphModule] = field(default_factory=dict)
    """Each version's graph with its kept regions as :class:`RegionKernel` submodules (what ``save`` writes);
    with ``rest="inductor"`` the version itself is Inductor's code of this graph, the regions spliced in."""
    rest: dict[tuple, str] = field(default_factory=dict)
    """Each version: what runs the graph around its kept regions (``"inductor"``, or ``"eager"`` and why)."""
    work: dict[tuple, tuple[int, int]] = field(default_factory=dict)
    """Each version's whole graph: (FLOPs, bytes), op by op (:func:`graph_work`); a region's are on its
    :class:`Region`, so the share in axon_eg's kernels is the kept regions' sum over these."""
    _warned: bool = False
    made: ClassVar[list[Compiled]] = []
    """The most recent ones (up to 64), in the order dynamo captured their graphs: for looking at reports."""

    def __post_init__(self) -> None:
        Compiled.made.append(self)
        del Compiled.made[:-64]

    def __call__(self, *args: Any) -> Any:
        if any(isinstance(a, torch.Tensor) and a.is_meta for a in args):
            return self._meta(args)
        if torch.is_grad_enabled() and _wants_grad(self.gm, args):
            if not self._warned:
                warnings.warn("axon_eg: this graph needs gradients; axon_eg compiles inference only, so it runs "
                              "as torch code (call the model under torch.no_grad() or torch.inference_mode() "
                              "to use axon_eg's kernels)", stacklevel=2)
                self._warned = True
            return self.gm(*args)
        key = signature(args)
        fn = self.versions.get(key)
        if fn is None:
            fn = self.versions[key] = self.build(args, key)
        return fn(*args)

    def _meta(self, args: tuple) -> Any:
        """A call with meta tensors (a model on the meta device): the graph as torch code, so meta tensors of
        the right shapes and dtypes come out, as eager torch gives them, and no kernel runs. With ``remote``
        the signature's version is built first (phase 1 needs shapes only: its regions' bundles are written)."""
        key = signature(args)
        if self.opts["remote"] is not None and key not in self.versions:
            with torch.no_grad():
                self.versions[key] = self.build(args, key)
        return self.gm(*args)

    def build(self, args: tuple, key: tuple, strict: bool = False) -> Callable[..., Any]:
        """The graph for this signature with its regions replaced by kernels. When it cannot be exported
        (data-dependent control flow, ...): with ``strict`` (``ax.optimize``'s first version) the error, one
        line naming the construct and the user's line, as ``ax.from_torch`` words it; else the whole graph
        as torch code, said once in a warning and in the report. torch's own logging during the export is
        kept out of the terminal either way."""
        regions: list[Region] = self.report.setdefault(key, [])
        try:
            module = self._export(args)
        except AxonError as exc:
            if strict:
                hint = "; torch.compile(model, backend='axon_eg') optimizes the graphs around it" \
                    if getattr(exc, "op", None) == "data-dependent control flow" else ""
                raise type(exc)(f"ax.optimize: {exc}{hint}", **_located(exc)) from None
            regions.append(Region("graph", [], why_torch=f"torch.export: {exc}"))
            warnings.warn(f"axon_eg: this graph runs as torch code: {exc}", stacklevel=3)
            self.rest[key] = "eager (it could not be exported)"
            self._say(regions, key)
            return self.gm
        self.work[key] = graph_work(module.graph)
        fused = partition(module, self.opts["region_ops"], self.opts["region_contractions"])
        _mark_state(fused, args)
        ahead = self._phase1_ahead(fused) if self.opts["remote"] is not None else {}
        for name, node in _region_calls(fused):
            region = Region(name, [target(n) for n in getattr(fused, name).graph.nodes if n.op == "call_function"])
            region.flops, region.bytes = graph_work(getattr(fused, name).graph)
            regions.append(region)
            if all(op in moves_no_arithmetic() or op == "getitem" for op in region.ops):
                region.why_torch = "views only"
                continue
            started = time.monotonic()
            try:
                kernel = compile_region(getattr(fused, name), node, f"{type(self.gm).__name__}_{name}", self.opts,
                                        region, ahead)
            except Exception as exc:  # noqa: BLE001 - a region axon_eg cannot take stays torch, said in the report
                region.why_torch = str(exc) if isinstance(exc, Unmeasured) else _first_line(exc)
                continue
            finally:
                region.seconds = time.monotonic() - started
            if kernel is None:
                continue
            region.kernel = kernel.best.id
            setattr(fused, name, kernel)
        fused.recompile()
        self.graphs[key] = fused
        run = self._rest(fused, args, key, kept=any(r.kernel for r in regions))
        self._say(regions, key)
        return run

    def _phase1_ahead(self, fused: torch.fx.GraphModule) -> dict[str, float]:
        """The remote flow's phase 1 of the version's regions, in parallel: each region whose bundle is not
        written yet, in a child process of its own (``forkserver``; as many at once as this machine has
        cores), when there are two or more; bundle directory -> phase-1 seconds for those written. A region
        that fails here is redone in the build's own loop, which words its error."""
        from concurrent.futures import ProcessPoolExecutor, as_completed
        from multiprocessing import get_context

        root = str(self.opts["remote"])
        opts = {k: self.opts[k] for k in _RUN_OPTIONS}
        jobs: dict[str, Any] = {}
        for name, node in _region_calls(fused):
            sub = getattr(fused, name)
            ops = [target(n) for n in sub.graph.nodes if n.op == "call_function"]
            if all(op in moves_no_arithmetic() or op == "getitem" for op in ops):
                continue
            try:
                program, cut = region_program(sub, node, f"{type(self.gm).__name__}_{name}")[:2]
                program = by_position(_region_roles(program, opts, cut, node))
                spec = region_run(program, opts, root, checked=False)
            except Exception:  # noqa: BLE001, S112 - the build's own loop words the error
                continue
            if not _pipeline().phase1_done(spec, "cuda"):
                jobs.setdefault(str(spec.bundle_dir), program)
        workers = min(len(jobs), os.cpu_count() or 1)
        if workers < 2:
            return {}
        done: dict[str, float] = {}
        with _main_not_reimported(), \
                ProcessPoolExecutor(max_workers=workers, mp_context=get_context("forkserver")) as pool:
            futures = {pool.submit(_bundle_one, program, opts, root): bdir for bdir, program in jobs.items()}
            for future in as_completed(futures):
                try:
                    done[futures[future]] = future.result()
                except Exception:  # noqa: BLE001, S112 - redone (and worded) in the build's own loop
                    continue
        return done

    def _rest(self, fused: torch.fx.GraphModule, args: tuple, key: tuple, kept: bool = True) -> Callable[..., Any]:
        """The version's callable: with ``rest="inductor"``, Inductor's code for ``fused`` with each kept
        region spliced in as an opaque custom op (:func:`splice`), and with no region ``kept``, Inductor's code
        ``torch.compile`` makes for the whole graph (Inductor's code for the exported, partitioned graph differs:
        0.98x ``torch.compile`` on a ShuffleNet unit, H100); with ``rest="eager"``, or for meta inputs
        (no kernel runs), or when Inductor fails (said in a warning and in :attr:`rest`), ``fused`` itself."""
        if self.opts["rest"] == "eager":
            self.rest[key] = "eager (option rest='eager')"
            return fused
        if any(isinstance(a, torch.Tensor) and a.is_meta for a in args):
            self.rest[key] = "eager (meta inputs: nothing runs)"
            return fused
        if not kept:  # torch.compile's own code: the graph dynamo captured, or the module dynamo will capture
            self.rest[key] = "inductor (no region kept: torch.compile's code for the whole graph)"
            if not self.captured:
                return torch.compile(self.gm)
        try:
            return inductor(splice(fused) if kept else self.gm, args, self.opts["verbose"])
        except Exception as exc:  # noqa: BLE001 - Inductor's failures are many; the graph still runs
            self.rest[key] = f"eager (Inductor failed: {_first_line(exc)})"
            warnings.warn(f"axon_eg: the graph around the regions runs as torch code: Inductor failed: "
                          f"{_first_line(exc)}", stacklevel=3)
            return fused
        finally:
            self.rest.setdefault(key, "inductor")

    def _export(self, args: tuple) -> torch.fx.GraphModule:
        """The graph exported to aten and unlifted, torch's logging captured; an export failure as one line
        (``ir.torch_export``'s diagnosis: data-dependent control flow, a shape mismatch, ... at the user's
        line), an :class:`AxonError`."""
        name = type(self.gm).__name__
        with _Captured():
            try:
                with torch.no_grad():
                    exported = torch.export.export(self.gm, tuple(args))
                failure = None
            except Exception as exc:  # noqa: BLE001 - torch raises many kinds; each is worded below
                failure = exc
        if failure is not None:
            error = _export_error(failure, name)
            if error is None:
                error = UnsupportedOperation(f"{name}: torch.export could not trace forward(): {_first_line(failure)}")
            raise error
        exported = functional(exported)
        module = exported.module()
        drop_asserts(module.graph)
        views_as_reshapes(module.graph)
        module.recompile()
        return module

    def _say(self, regions: list[Region], key: tuple) -> None:
        if self.opts["verbose"]:
            for r in regions:
                print(f"axon_eg: {r.line()}")
            print(f"axon_eg: the rest of the graph: {self.rest.get(key, 'eager')}")


def functional(exported: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """``exported`` without in-place ops (``relu_``, ``add_``, ``mul_``, ``copy_``, ``index_put_``, ...): each
    becomes its out-of-place op (``run_decompositions`` with an empty table functionalizes and decomposes
    nothing), so an in-place op after a region cut never makes a region write its input. A write the caller
    can see (a graph input really mutated) comes back as a ``copy_`` into that input at the end of the
    unlifted module, which runs as torch code. A graph without in-place ops is returned as it is."""
    mutates = any(n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
                  and n.target._schema.is_mutable for n in exported.graph.nodes)
    if not mutates:
        return exported
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch's own, copying a pytree spec
        return exported.run_decompositions({})


class Unmeasured(Exception):
    """The remote flow: a region's bundle is written and waits for the worker's measurements."""


REGION_BASELINES = {"inductor": ("torch_eager", "torch_compile_default"), "eager": ("torch_eager",)}
"""The baselines a region is measured against, by option ``rest``: what runs in its place when no candidate
beats it. With Inductor around the regions, that is Inductor's code of the region (``torch.compile`` in its
default mode, the mode the hybrid compiles the rest in; compiled alone, it stands for what Inductor makes of
the region inside the graph) or eager, whichever is faster; with ``rest="eager"``, its eager code only. On
the CPU (the Triton interpreter) no compile baseline is built: nothing there is timed against Inductor."""


def region_program(sub: torch.fx.GraphModule, call: torch.fx.Node, name: str) -> tuple[Any, ...]:
    """The region's Program, imported from ``sub`` with fake inputs of the shapes the call site recorded (no
    tensor memory), each distinct computed output once: ``(program, sub, fakes, single, where, keep)`` with
    ``sub`` cut to the kept outputs where some were repeats or inputs (:func:`_outputs` says ``where`` and
    ``keep``). Raises NotImplementedError for a region that takes a non-tensor, no input at all (a constant
    of ``forward``, left to the code around it) or computes nothing."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    out_node = next(n for n in sub.graph.nodes if n.op == "output")
    single = not isinstance(out_node.args[0], (tuple, list))
    vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in call.args]
    if not all(isinstance(v, torch.Tensor) for v in vals):
        raise NotImplementedError("a region input that is not a tensor")
    if not vals:  # a table computed from constants of forward (torch.arange(...).sin()): nothing to optimize per call
        raise NotImplementedError("it reads no input (a constant of forward)")
    with FakeTensorMode(allow_non_fake_inputs=True):  # shapes and dtypes only: no tensor memory
        fakes = tuple(torch.empty(tuple(v.shape), dtype=v.dtype, device="cpu") for v in vals)
    sub = _on_cpu(sub)
    program = from_torch(sub, fakes, name=name)
    where, keep = _outputs(program)
    args = [n.name for n in sub.graph.nodes if n.op == "placeholder"]
    names = [s.name for s in program.inputs]
    if any(kind == "in" and names[k] not in args for kind, k in where):  # a tensor of its own, not an argument
        raise NotImplementedError("it hands on, as it is, a tensor it holds or makes (a parameter, torch.arange)")
    where = [("in", args.index(names[k])) if kind == "in" else (kind, k) for kind, k in where]  # by argument
    if not keep:
        raise NotImplementedError("it computes nothing: each of its outputs is one of its inputs")
    if len(keep) < len(program.outputs):  # the kernel writes each distinct computed output once
        sub = copy.deepcopy(sub)
        out = next(n for n in sub.graph.nodes if n.op == "output")
        results = out.args[0] if isinstance(out.args[0], (tuple, list)) else [out.args[0]]
        out.args = (tuple(results[j] for j in keep),)
        sub.graph.eliminate_dead_code()
        sub.recompile()
        program = from_torch(sub, fakes, name=name)
    return program, sub, fakes, single, where, keep


@contextlib.contextmanager
def _main_not_reimported() -> Any:
    """While child processes start: ``__main__`` without the file or module name that ``multiprocessing`` would
    import it from in each child, so a user's script that calls ``ax.optimize`` at its top level, with no
    ``if __name__ == "__main__"`` guard, is neither run again in the children nor refused by them (what they
    run, :func:`_bundle_one`, is axon_eg's and its arguments are plain data)."""
    import sys

    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
    try:
        for k in saved:
            setattr(main, k, None) if k == "__spec__" else delattr(main, k)
        yield
    finally:
        for k, v in saved.items():
            setattr(main, k, v)


def _on_cpu(sub: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``sub``, or a copy of it whose device arguments (``torch.arange(..., device=x.device)``, ``.to(device)``
    of a model on the GPU or the meta device) say the CPU, where the importer's fake inputs are: the Program
    has no device, and a factory on another device than its inputs cannot be traced with them."""
    def moved(a: Any) -> Any:
        return torch.device("cpu") if isinstance(a, torch.device) and a.type != "cpu" else a

    if not any(moved(a) is not a for n in sub.graph.nodes for a in (*n.args, *n.kwargs.values())):
        return sub
    sub = copy.deepcopy(sub)
    for n in sub.graph.nodes:
        n.args = tuple(moved(a) for a in n.args)
        n.kwargs = {k: moved(a) for k, a in n.kwargs.items()}
    sub.recompile()
    return sub


def _pipeline() -> Any:
    """:mod:`axon_eg.pipeline`, imported at the first region's build rather than with this module: it loads polars,
    and torch imports this module (the backend's entry point) for any ``torch.compile(backend="axon_eg")``."""
    from axon_eg import pipeline  # lazy: loads polars; importing the backend loads torch only

    return pipeline


def by_position(program: Any) -> Any:
    """The region's program with its inputs named by position (``in0``, ``in1``, ...): the kernel is called
    with the region's arguments in order, so the names are not its business, and two identical blocks (a
    transformer's layers, or the same block in two models, differing only in their parameters' names) get one
    bundle, one set of measured rows and one cache entry."""
    return canonical_inputs(program)[0]


_RUN_OPTIONS = ("target", "hw", "k", "precision", "saturation_s", "rest")
"""The backend's options that make a region's run specification (``region_run``)."""


def region_run(program: Any, opts: Mapping[str, Any], cache_dir: Any, *, checked: bool = True) -> Any:
    """The region's run specification (``pipeline.Run``) under the backend's ``opts``, its bundle under
    ``cache_dir``: measured against the code that would run in its place (``REGION_BASELINES``)."""
    return _pipeline().Run.of(program, opts["target"], opts["hw"], opts["k"], cache_dir=cache_dir, precision=opts["precision"],
                  saturation_s=opts["saturation_s"], baselines=REGION_BASELINES[opts["rest"]], checked=checked)


def _bundle_one(program: Any, opts: dict[str, Any], root: str) -> float:
    """A child process's work in :meth:`Compiled._phase1_ahead`: one region's bundle; its phase-1 seconds."""
    started = time.monotonic()
    _pipeline().write_bundle_only(region_run(program, opts, root), device="cuda")
    return time.monotonic() - started


STATE_META = "axon_eg_state"
"""The meta key a partitioned graph's node carries when it is module state (``_mark_state``)."""


def _mark_state(fused: torch.fx.GraphModule, args: tuple) -> None:
    """Mark the nodes of ``fused`` (the graph, partitioned) that are module state: an attribute it reads
    (``ax.optimize`` exports the module itself: its parameters and buffers are ``get_attr`` nodes), a parameter
    dynamo hands to the graph as an ``nn.Parameter`` argument, or a buffer (dynamo names its placeholder
    ``..._buffers_...``). A region reads them as arguments, so the importer alone cannot tell them from data."""
    for node in fused.graph.nodes:
        if node.op == "get_attr":
            node.meta[STATE_META] = True
    for node, arg in zip((n for n in fused.graph.nodes if n.op == "placeholder"), args):
        if isinstance(arg, torch.nn.Parameter) or "_buffers_" in node.name:
            node.meta[STATE_META] = True


def _region_roles(program: Any, opts: Mapping[str, Any], sub: torch.fx.GraphModule, call: torch.fx.Node) -> Any:
    """The region's program with the inputs module state feeds (``_mark_state``) in the role ``parameter`` (the
    harness draws a weight at its initialization's scale, ``backends.kernel.weight_scale``), and with ``freeze``
    its parameters and buffers frozen (``Program.frozen``), so that what depends on them alone (a norm's gain
    folded into a weight, sibling weights stacked, a transposed weight) runs once per version of the weights."""
    args = [n.name for n in sub.graph.nodes if n.op == "placeholder"]
    state = {name for name, a in zip(args, call.args) if isinstance(a, torch.fx.Node) and a.meta.get(STATE_META)}
    roles = {s.name: "parameter" for s in program.inputs if s.name in state} | dict(program.roles)
    program = replace(program, roles=tuple((s.name, roles[s.name]) for s in program.inputs if s.name in roles))
    return program.frozen() if opts["freeze"] else program


def compile_region(sub: torch.fx.GraphModule, call: torch.fx.Node, name: str, opts: Mapping[str, Any],
                   region: Region | None = None, ahead: Mapping[str, float] | None = None) -> RegionKernel | None:
    """The region's Program optimized (``saturate_and_extract``) and wrapped to stand in for ``sub``; None
    when the code around it is as fast (``region.why_torch`` says so). With ``opts["remote"]``: phase 1 writes
    the region's bundle there (unless ``ahead``, bundle directory -> phase-1 seconds, says a child process
    wrote it for this build) and raises :class:`Unmeasured` until the worker's rows are in it (``BUNDLE/
    rows.jsonl``), then the selection reads them."""
    pipeline = _pipeline()
    program, sub, fakes, single, where, keep = region_program(sub, call, name)
    extras = _made_inputs(sub, fakes, name, program)
    program = by_position(_region_roles(program, opts, sub, call))
    baselines = REGION_BASELINES[opts["rest"]]
    if opts["remote"] is not None:
        root = Path(opts["remote"])
        spec = region_run(program, opts, root)
        bdir = spec.bundle_dir
        if region is not None:
            region.bundle = str(bdir)
        rows = bdir / ROWS_NAME
        if not rows.is_file():
            started = time.monotonic()
            if str(bdir) not in (ahead or {}):  # a bundle phase 1 already wrote whole is kept as it is
                pipeline.write_bundle_only(spec, device="cuda")
            if region is not None:
                region.phase1_s = (ahead or {}).get(str(bdir), time.monotonic() - started)
            raise Unmeasured(f"not measured yet: its bundle is {bdir}; on a GPU run `python -m axon_eg.measure "
                             f"{root / 'bundles'}/*`, bring the rows back into it and build again")
        result = pipeline.saturate_and_extract(spec, rows=rows)
    else:
        result = pipeline.saturate_and_extract(region_run(program, opts, opts["cache_dir"]), budget_s=opts["budget_s"],
                                      device=opts["device"])
    if region is not None:
        region.phase1_s = result.phase1_s
    best = region_kernel(result, baselines)
    if best is None:
        if region is not None:
            region.why_torch = f"the selection is {result.best.id}"
        return None
    return RegionKernel(best, single, None if len(keep) == len(where) else where, extras)


def _made_inputs(sub: torch.fx.GraphModule, fakes: tuple, name: str, program: Any) -> tuple:
    """The program's inputs that the region's caller does not have: tensors the importer made from constants
    of ``forward`` (``torch.arange``, ``one_hot``'s range: buffers named ``_arange0``, ...), as
    ``(position, values, torch dtype)``; the kernel is called with them inserted at their positions."""
    given = {n.name for n in sub.graph.nodes if n.op == "placeholder"}
    made = [(i, s) for i, s in enumerate(program.inputs) if s.role != "input" and s.name not in given]
    if not made:
        return ()
    state = import_torch(sub, fakes, name=name).state
    return tuple((i, state[s.name].tolist(), getattr(torch, s.dtype.torch_name)) for i, s in made)


def region_kernel(result: Any, baselines: tuple[str, ...] = REGION_BASELINES["eager"]) -> Any:
    """The kernel a region runs, or None for the code around it (eager, or Inductor's): the selection when
    it is a kernel; when it is a baseline, the fastest correct candidate timed faster than every one of
    ``baselines`` that ran correctly (the code that would run in the region's place; another baseline in
    the table, from an earlier run of the same program, cannot stand in for a region), else None."""
    import polars as pl

    from axon_eg.selection import kernel_of  # lazy: loads polars (as _pipeline says)

    if result.best.kind != "baseline":
        return result.best
    df = result.table.filter((pl.col("status") == "ok") & pl.col("median_us").is_not_null())
    bars = df.filter(pl.col("id").is_in(list(baselines)))["median_us"]
    fast = df.filter((pl.col("kind") == "candidate") & (pl.col("median_us") < (bars.min() if len(bars) else 0.0)))
    if fast.height == 0:
        return None
    return kernel_of(result.table, fast.sort("median_us")["id"][0], result.best.program, result.bundle)


_SPLICED = torch.library.Library("axon_eg", "FRAGMENT")  # noqa: TOR901 - the regions' custom ops (``splice``)
_spliced_count = [0]


def region_op(kernel: RegionKernel, name: str) -> Any:
    """``kernel`` registered as an opaque custom op ``axon_eg::<name>_<n>(Tensor[] args) -> Tensor[]``: its
    real implementation runs the kernel (the region's computed outputs, new tensors), its fake gives tensors
    of those shapes and dtypes on the arguments' device, so Inductor and the fake-tensor tracer schedule
    around it without looking inside. Returns the op's overload."""
    _spliced_count[0] += 1
    op = f"{name.replace('.', '_')}_{_spliced_count[0]}"
    specs = kernel.output_specs()
    _SPLICED.define(f"{op}(Tensor[] args) -> Tensor[]")

    def real(args: list[torch.Tensor]) -> list[torch.Tensor]:
        # row-major, as the fake says and Inductor asserts: a kernel may hand back a library call's output in
        # the library's own order (SDPA's [b, s, h, d] memory under a [b, h, s, d] shape), copied only then
        return [o if o.is_contiguous() else o.contiguous() for o in kernel.computed(*args)]

    def fake(args: list[torch.Tensor]) -> list[torch.Tensor]:
        device = args[0].device if args else torch.device("cpu")
        return [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in specs]

    _SPLICED.impl(op, real, "CompositeExplicitAutograd")
    torch.library.register_fake(f"axon_eg::{op}", fake, lib=_SPLICED)
    return getattr(torch.ops.axon_eg, op).default


def splice(fused: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``fused`` whose kept regions (:class:`RegionKernel` submodules) are calls of their custom
    ops (:func:`region_op`), each region output wired to the op's output or, where the region hands an input
    back (``RegionKernel.where``), to that input: a custom op's outputs never alias its inputs. The other
    submodules (regions left to torch) stay; Inductor traces through them."""
    with warnings.catch_warnings():  # torch's own deprecation inside copying a pytree spec
        warnings.simplefilter("ignore", FutureWarning)
        gm = torch.fx.GraphModule(fused, copy.deepcopy(fused.graph))
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op != "call_module" or not isinstance(gm.get_submodule(node.target), RegionKernel):
            continue
        kernel = gm.get_submodule(node.target)
        op = region_op(kernel, str(node.target))
        with graph.inserting_before(node):
            call = graph.call_function(op, (list(node.args),))
            computed = [graph.call_function(operator.getitem, (call, k)) for k in range(len(kernel.output_specs()))]
        where = kernel.where or [("out", k) for k in range(len(computed))]
        outs = [computed[k] if kind == "out" else node.args[k] for kind, k in where]
        if kernel.single:
            node.replace_all_uses_with(outs[0])
        else:
            for user in list(node.users):
                if user.op == "call_function" and user.target is operator.getitem:
                    user.replace_all_uses_with(outs[user.args[1]])
                    graph.erase_node(user)
            if node.users:
                with graph.inserting_before(node):
                    whole = graph.call_function(tuple, (outs,))
                node.replace_all_uses_with(whole)
        graph.erase_node(node)
        gm.delete_submodule(node.target)
    graph.eliminate_dead_code()
    gm.recompile()
    return gm


def inductor(gm: torch.fx.GraphModule, args: tuple, verbose: bool = False) -> Callable[..., Any]:
    """``gm`` compiled by Inductor (``torch._inductor.compile_fx.compile_fx``, its default mode: what
    ``torch.compile`` does with a captured graph) for ``args``; torch's own logging kept out of the terminal
    unless ``verbose``."""
    from torch._inductor.compile_fx import compile_fx

    with torch.no_grad():
        if verbose:
            return compile_fx(gm, list(args))
        with _Captured():
            return compile_fx(gm, list(args))


def _outputs(program: Any) -> tuple[list[tuple[str, int]], list[int]]:
    """(each region output's source, ``RegionKernel.where``; the region outputs the kernel computes, by
    index): an output that is a program input is that argument, a repeat is its first occurrence."""
    inputs = list(program.input_ids)
    where: list[tuple[str, int]] = []
    keep: list[int] = []
    for j, o in enumerate(program.outputs):
        first = list(program.outputs).index(o)
        if o in inputs:
            where.append(("in", inputs.index(o)))
        elif first < j:
            where.append(where[first])
        else:
            keep.append(j)
            where.append(("out", len(keep) - 1))
    return where, keep


def signature(args: tuple) -> tuple:
    """What a version is built for: each tensor's shape, dtype and device, each other argument itself."""
    return tuple((tuple(a.shape), a.dtype, a.device) if isinstance(a, torch.Tensor) else ("value", a) for a in args)


def _region_calls(fused: torch.fx.GraphModule) -> list[tuple[str, torch.fx.Node]]:
    return [(n.target, n) for n in fused.graph.nodes if n.op == "call_module" and str(n.target).startswith("fused_")]


def _wants_grad(gm: torch.nn.Module, args: tuple) -> bool:
    return any(isinstance(a, torch.Tensor) and a.requires_grad for a in args) or \
        any(p.requires_grad for p in gm.parameters())


def _short(op: str) -> str:
    return op.removeprefix("aten.").removesuffix(".default")


def _located(exc: AxonError) -> dict[str, Any]:
    """The keyword arguments that rebuild ``exc`` with another message (an UnsupportedOperation's op and line)."""
    return {"op": exc.op, "location": exc.location} if isinstance(exc, UnsupportedOperation) else {}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:300]


__all__ = ["DEFAULTS", "REGION_BASELINES", "RESTS", "Compiled", "OptimizedModule", "Region",
           "Unmeasured", "backend", "compile_region", "inductor", "optimize", "options",
           "region_kernel", "region_op", "region_program", "signature", "splice", "write_model_new"]
