"""``torch.compile(model, backend="axon_eg")``: dynamo's graphs through axon_eg, region by region.

The backend (registered under the entry point group ``torch_dynamo_backends``, so the name works after
``pip install``) receives each graph dynamo captures and returns a callable that, at the first call with
a given signature (each tensor's shape, dtype and device, each other argument's value), builds and keeps
that signature's version:

1. the graph is exported to aten (``torch.export``, the training IR the program importer reads: linear,
   softmax, layer norm and attention arrive whole) and unlifted (parameters as attributes);
2. its ``call_function`` nodes that axon_eg imports (``ir.torch_import.SUPPORTED_ATEN_OPS``) are grouped
   into maximal regions (``CapabilityBasedPartitioner``: a region is convex, so the rest of the graph still
   runs in order around it); a region of views only (``aten.view``, ``aten.transpose``, ...) stays torch;
3. each region becomes a Program (``from_torch`` on the region's submodule, with fake inputs: no tensor
   memory) and goes through ``saturate_and_extract`` with the backend's options (cache first, so a second
   process starts at once); its selected kernel replaces the region, called with contiguous inputs;
4. a region the importer refuses, or whose selection is a torch baseline, stays torch code; so do unsupported
   ops between regions. Every region's fate is in :attr:`Compiled.report` (``verbose`` prints it).

A new signature builds a new version (dynamo's own guards decide when it recompiles the graph; where it
marks a dim dynamic, the sizes still arrive here as values and each distinct one is built once).

Inference only: a call with gradients enabled and a tensor (argument or parameter) that requires them runs
the captured graph as torch code (the backward is torch's), with a one-time warning saying so.

Options (``torch.compile(..., options={...})``, all optional): ``target`` ("triton"), ``hw`` ("h200"),
``k`` (4 candidates per region), ``budget_s``, ``precision``, ``cache_dir``, ``device`` (where phase 2
measures: the local GPU, else the Triton interpreter on the CPU), ``saturation_s``, ``verbose``,
``region_ops`` and ``region_contractions`` (24 and 3: a larger region is cut into runs of at most that many
computing ops and contractions, see :func:`partition`),
``remote`` (a directory: phase 2 on another machine's GPU, below). An unknown option is refused naming it.

A region is measured against its eager code only (``REGION_BASELINES``): that is what runs in its place
when no candidate is faster.

**Remote phase 2** (``remote=DIR``; phase 1 here, where egglog and z3 are, the worker on a bare GPU box that
has only torch and triton): the first build writes each region's bundle under ``DIR/bundles`` and runs the
region as torch code (its report line names the bundle). On the GPU box, ``python -m axon_eg.measure
DIR/bundles/*`` writes each bundle's ``rows.jsonl``; with those rows back in ``DIR``, the next build (a new
process, or ``ax.optimize`` again) selects from them, and ``save`` writes the ``ModelNew`` file to run
there.
"""

from __future__ import annotations

import copy
import operator
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import torch

from axon_eg.errors import InvalidArgument

DEFAULTS: dict[str, Any] = {"target": "triton", "hw": "h200", "k": 4, "budget_s": None, "precision": None,
                            "cache_dir": None, "device": None, "saturation_s": 2.0, "verbose": False,
                            "region_ops": 24, "region_contractions": 3, "remote": None}
"""The backend's options and their defaults."""

@cache
def _moves_no_arithmetic() -> frozenset[str]:
    """Ops that move no arithmetic (the importer's view-like ops and ``clone``; not its casts, which convert
    every element): a region of these alone is left to torch (a kernel would only copy), and they do not
    count toward a region's size."""
    from axon_eg.ir.aten_table import _VIEW_LIKE

    return (_VIEW_LIKE | {"aten.clone.default"}) - {"aten.to.dtype", "aten.type_as.default"}


def options(given: Mapping[str, Any] | None) -> dict[str, Any]:
    """The backend's options with defaults filled in; InvalidArgument naming an unknown one."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise InvalidArgument(f"torch.compile(backend='axon_eg'): unknown option {unknown[0]!r} "
                              f"(options: {', '.join(sorted(DEFAULTS))})")
    from axon_eg import validate

    for name in ("region_ops", "region_contractions"):
        if name in given:
            validate.positive_int(given[name], f"torch.compile(backend='axon_eg'): option {name}")
    if given.get("remote") is not None and not isinstance(given["remote"], (str, Path)):
        raise InvalidArgument(f"torch.compile(backend='axon_eg'): option remote must be a directory path, got "
                              f"{type(given['remote']).__name__}")
    if given.get("remote") is not None and given.get("cache_dir") is not None and \
            Path(given["remote"]).resolve() != Path(given["cache_dir"]).resolve():
        raise InvalidArgument(f"torch.compile(backend='axon_eg'): remote {str(given['remote'])!r} and cache_dir "
                              f"{str(given['cache_dir'])!r}: the remote directory is the cache of its regions' runs, "
                              "give one of the two")
    if given.get("target", "triton") != "triton":
        raise InvalidArgument(f"torch.compile(backend='axon_eg'): target {given['target']!r}: the backend runs "
                              "Triton kernels on torch tensors (for NKI, import with ax.from_torch and call "
                              "ax.saturate_and_extract(program, target='nki'))")
    return {**DEFAULTS, **given}


class OptimizedModule(torch.nn.Module):
    """``ax.optimize(module, example_inputs)``: ``module`` with its regions running axon_eg's kernels (the
    drop-in form of the backend, no dynamo): same ``forward`` arguments, the same parameter objects
    (``module`` is kept as ``.original``). Built for the example inputs' signature at construction; another
    signature builds its version at its first call. Inference only, like the backend."""

    def __init__(self, module: torch.nn.Module, example_inputs: Any, **opts: Any):
        super().__init__()
        self.original = module
        self.compiled = Compiled(module, options(opts))
        args = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
        with torch.no_grad():
            key = signature(args)
            self.compiled.versions[key] = self.compiled.build(args, key)

    def forward(self, *args: Any) -> Any:
        return self.compiled(*args)

    @property
    def report(self) -> list[Region]:
        """Every region of every version built so far, with its kernel or why it runs as torch code."""
        return [r for regions in self.compiled.report.values() for r in regions]

    def save(self, path: str | Path) -> Path:
        """Write a self-contained Python file (KernelBench's ``ModelNew`` form) that imports only torch and
        triton: the source file of the original module's class (its ``Model``, ``get_inputs``, ...), each
        region's kernel file, and ``class ModelNew(<the class>)`` whose ``forward`` runs the graph of the
        first version built (its regions calling the kernels, the rest the same aten ops). ``ModelNew`` is
        built like the original (same ``__init__`` arguments, so the same parameters from the same seed) and
        takes the inputs of that version's shapes (the kernels refuse others, naming the argument)."""
        return Path(write_model_new(self, Path(path)))


_LOADER = '''
def _axon_eg_kernel(name, source):
    """Run one embedded kernel file as its own module (its source registered with linecache, where
    triton.jit reads a function's source) and return its entry point."""
    import linecache
    import sys
    import types

    filename = f"<axon_eg kernel {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    module = types.ModuleType(f"axon_eg_saved_{name}")
    module.__file__ = filename
    sys.modules[module.__name__] = module
    exec(compile(source, filename, "exec"), module.__dict__)
    return module.kernel


def _axon_eg_region(kernel, shapes, dtypes, single, where):
    """A region's kernel called as the graph calls it: contiguous inputs, outputs allocated here (a kernel
    written to return its outputs is given none: ``shapes`` is None); ``where`` places each output of the
    region: ("out", k) the kernel's k-th, ("in", k) the k-th argument itself."""
    def run(*args):
        given = args
        args = [a.contiguous() for a in args]
        if shapes is None:
            outs = kernel(*args)
            outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        else:
            outs = [torch.empty(s, dtype=d, device=args[0].device) for s, d in zip(shapes, dtypes)]
            kernel(*args, *outs)
        if where is not None:
            outs = [outs[k] if kind == "out" else given[k] for kind, k in where]
        return outs[0] if single else tuple(outs)
    return run
'''


def write_model_new(optimized: OptimizedModule, path: Path) -> Path:
    """:meth:`OptimizedModule.save` (see there)."""
    import inspect

    from torch.utils import _pytree as pytree

    cls = type(optimized.original)
    try:
        origin = Path(inspect.getsourcefile(cls) or "")
        original = origin.read_text()
    except (OSError, TypeError) as exc:
        raise InvalidArgument(f"save: the source file of {cls.__name__} cannot be read ({exc}); ModelNew "
                              "subclasses it, so it must come from a file") from None
    graph_module = next(iter(optimized.compiled.versions.values()))
    if not isinstance(graph_module, torch.fx.GraphModule):
        raise InvalidArgument(f"save: {cls.__name__} runs as torch code (it could not be exported); nothing to save")
    with warnings.catch_warnings():  # torch's own deprecation inside copying a pytree spec
        warnings.simplefilter("ignore", FutureWarning)
        graph = copy.deepcopy(graph_module.graph)
    out_spec = graph._codegen.pytree_info.out_spec if hasattr(graph._codegen, "pytree_info") else None
    for node in list(graph.nodes):  # the export's own input check: the kernels check their arguments
        if node.op == "call_module" and node.target == "_guards_fn":
            graph.erase_node(node)
    _portable(graph)
    graph._codegen = torch.fx.graph.CodeGen()
    code = graph.python_code("self").src.replace("def forward(self", "def _axon_eg_graph(self", 1)
    parts = [f"# ModelNew written by axon_eg {_version()}: the original file, then its kernels and ModelNew.",
             f"# ===== the original: {origin.name}", original.rstrip(), "", "",
             "# ===== axon_eg: each region's kernel and the graph that calls them (imports torch and triton only)",
             "import torch  # noqa: E402", "from torch.utils import _pytree as _axon_eg_pytree  # noqa: E402",
             _LOADER.strip(), "", "",
             "_AXON_EG_DEVICE = torch.device('cpu')  # the device of the inputs of the latest call: tensors the graph "
             "creates go there", "", ""]
    regions = []
    for name, child in graph_module.named_children():
        if isinstance(child, RegionKernel):
            program = child.best.program
            returns = child.best.mode == "return"
            shapes = None if returns else [tuple(program.concrete_shape(o)) for o in program.outputs]
            dtypes = [] if returns else [f"torch.{program.nodes[o].dtype.torch_name}" for o in program.outputs]
            parts += [f"_AXON_EG_{name.upper()} = {child.best.path.read_text()!r}", ""]
            regions.append(f"    {name} = staticmethod(_axon_eg_region(_axon_eg_kernel({name!r}, _AXON_EG_{name.upper()}), "
                           f"{shapes!r}, [{', '.join(dtypes)}], {child.single!r}, {child.where!r}))")
        elif isinstance(child, torch.fx.GraphModule):  # a region left to torch: its aten ops as a function
            sub = copy.deepcopy(child.graph)
            _portable(sub)
            sub._codegen = torch.fx.graph.CodeGen()
            parts += [sub.python_code("self").src.replace("def forward(self", f"def _axon_eg_{name}(self", 1), ""]
            regions.append(f"    def {name}(self, *args):\n        return _axon_eg_{name}(self, *args)")
    parts += [code, ""]
    spec = pytree.treespec_dumps(out_spec) if out_spec is not None else None
    parts += [f"_AXON_EG_OUT_SPEC = {spec!r}", "", "",
              f"class ModelNew({cls.__name__}):",
              f'    """{cls.__name__} with axon_eg\'s kernels: same __init__ and parameters, forward through them."""',
              "", *regions, "",
              "    def forward(self, *args):",
              "        global _AXON_EG_DEVICE",
              "        _AXON_EG_DEVICE = next((a.device for a in args if isinstance(a, torch.Tensor)), _AXON_EG_DEVICE)",
              "        out = _axon_eg_graph(self, *args)",
              "        if _AXON_EG_OUT_SPEC is None:",
              "            return out",
              "        leaves = list(out) if isinstance(out, (tuple, list)) else [out]",
              "        return _axon_eg_pytree.tree_unflatten(leaves, _axon_eg_pytree.treespec_loads(_AXON_EG_OUT_SPEC))",
              ""]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(parts))
    tmp.replace(path)
    return path


class _CallersDevice:
    """Written as ``_AXON_EG_DEVICE`` in the saved graph: the device of the call's inputs."""

    def __repr__(self) -> str:
        return "_AXON_EG_DEVICE"


def _portable(graph: torch.fx.Graph) -> None:
    """The graph free of the device it was exported on (the remote flow exports on the meta device, the
    saved file runs on a GPU): a tensor the graph creates goes to the device of the call's inputs."""
    _drop_asserts(graph)
    for node in graph.nodes:
        if isinstance(node.kwargs.get("device"), torch.device):
            node.kwargs = {**node.kwargs, "device": _CallersDevice()}


def _drop_asserts(graph: torch.fx.Graph) -> None:
    """Export's metadata assertions (``aten._assert_tensor_metadata`` after a dtype conversion: checks of
    what the version's signature already fixes, no value) removed: each reads a value, which would make the
    region computing it write it out for nothing."""
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is torch.ops.aten._assert_tensor_metadata.default \
                and not node.users:
            graph.erase_node(node)


def _version() -> str:
    from axon_eg import __version__

    return __version__


def optimize(module: torch.nn.Module, example_inputs: Any, **opts: Any) -> OptimizedModule:
    """``module`` optimized for ``example_inputs`` (options as the backend's, e.g. ``k=4, hw="h200"``)."""
    if not isinstance(module, torch.nn.Module):
        raise InvalidArgument(f"optimize takes an nn.Module, got {type(module).__name__}")
    return OptimizedModule(module, example_inputs, **opts)


def backend(gm: torch.fx.GraphModule, example_inputs: list[Any], *, options: Mapping[str, Any] | None = None,
            mode: str | None = None) -> Callable[..., Any]:
    """The dynamo backend: a :class:`Compiled` for the captured graph ``gm`` (see the module docstring).
    ``mode`` (torch.compile's) is accepted and not used."""
    return Compiled(gm, globals()["options"](options))


@dataclass
class Region:
    """One region of one signature's graph: its ops, and the kernel that runs it or why torch does."""

    name: str
    ops: list[str]
    kernel: str | None = None  # the selected candidate's id
    why_torch: str | None = None  # set when the region runs as torch code
    bundle: str | None = None  # the remote flow: the region's bundle (waiting for its measurements, or measured)

    def line(self) -> str:
        what = f"kernel {self.kernel}" if self.kernel else f"torch ({self.why_torch})"
        return f"{self.name}: {len(self.ops)} ops ({', '.join(_short(o) for o in self.ops[:6])}" \
               f"{', ...' if len(self.ops) > 6 else ''}) -> {what}"


@dataclass
class Compiled:
    """What the backend returns for one captured graph: a version per call signature, built at its first
    call (:meth:`build`), and the report of each version's regions."""

    gm: torch.fx.GraphModule
    opts: dict[str, Any]
    versions: dict[tuple, Callable[..., Any]] = field(default_factory=dict)
    report: dict[tuple, list[Region]] = field(default_factory=dict)
    _warned: bool = False
    made: ClassVar[list[Compiled]] = []
    """The most recent ones (up to 64), in the order dynamo captured their graphs: for looking at reports."""

    def __post_init__(self) -> None:
        Compiled.made.append(self)
        del Compiled.made[:-64]

    def __call__(self, *args: Any) -> Any:
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

    def build(self, args: tuple, key: tuple) -> Callable[..., Any]:
        """The graph for this signature with its regions replaced by kernels (the whole graph as torch code
        when it cannot be exported)."""
        regions: list[Region] = self.report.setdefault(key, [])
        try:
            with torch.no_grad():
                exported = torch.export.export(self.gm, tuple(args))
            module = exported.module()
            _drop_asserts(module.graph)
            module.recompile()
        except Exception as exc:  # noqa: BLE001 - any export failure leaves the graph to torch, said in the report
            regions.append(Region("graph", [], why_torch=f"torch.export: {_first_line(exc)}"))
            self._say(regions)
            return self.gm
        fused = partition(module, self.opts["region_ops"], self.opts["region_contractions"])
        for name, node in _region_calls(fused):
            region = Region(name, [_target(n) for n in getattr(fused, name).graph.nodes if n.op == "call_function"])
            regions.append(region)
            if all(op in _moves_no_arithmetic() or op == "getitem" for op in region.ops):
                region.why_torch = "views only"
                continue
            try:
                kernel = compile_region(getattr(fused, name), node, f"{type(self.gm).__name__}_{name}", self.opts,
                                        region)
            except Exception as exc:  # noqa: BLE001 - a region axon_eg cannot take stays torch, said in the report
                region.why_torch = str(exc) if isinstance(exc, Unmeasured) else _first_line(exc)
                continue
            if kernel is None:
                continue
            region.kernel = kernel.best.id
            setattr(fused, name, kernel)
        fused.recompile()
        self._say(regions)
        return fused

    def _say(self, regions: list[Region]) -> None:
        if self.opts["verbose"]:
            for r in regions:
                print(f"axon_eg: {r.line()}")


class RegionKernel(torch.nn.Module):
    """A region's selected kernel standing in for its submodule: same arguments, same outputs. ``where``
    gives each output of the region: ``("out", k)`` the kernel's k-th output, ``("in", k)`` the region's k-th
    argument itself (an output that is an input, e.g. a ``.float()`` of a float tensor: never copied)."""

    def __init__(self, best: Any, single: bool, where: list[tuple[str, int]] | None = None):
        super().__init__()
        self.best, self.single, self.where = best, single, where

    def forward(self, *args: Any) -> Any:
        out = self.best(*(a.contiguous() if isinstance(a, torch.Tensor) else a for a in args))
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if self.where is not None:
            outs = [outs[k] if kind == "out" else args[k] for kind, k in self.where]
        return outs[0] if self.single else tuple(outs)


class Unmeasured(Exception):
    """The remote flow: a region's bundle is written and waits for the worker's measurements."""


REGION_BASELINES = ("torch_eager",)
"""The only baseline a region is measured against: what runs in its place when no candidate beats it is its
eager aten code (``torch.compile``'s, inside a dynamo backend, is not on offer)."""


def compile_region(sub: torch.fx.GraphModule, call: torch.fx.Node, name: str, opts: Mapping[str, Any],
                   region: Region | None = None) -> RegionKernel | None:
    """The region's Program optimized (``saturate_and_extract``) and wrapped to stand in for ``sub``; None
    when eager torch code is as fast (``region.why_torch`` says so). With ``opts["remote"]``: phase 1 writes
    the region's bundle there and raises :class:`Unmeasured` until the worker's rows are in it (``BUNDLE/
    rows.jsonl``), then the selection reads them."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from axon_eg.ir.torch_import import from_torch
    from axon_eg.measure.worker import ROWS_NAME
    from axon_eg.pipeline import bundle_path, saturate_and_extract, write_bundle_only

    out_node = next(n for n in sub.graph.nodes if n.op == "output")
    single = not isinstance(out_node.args[0], (tuple, list))
    vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in call.args]
    if not all(isinstance(v, torch.Tensor) for v in vals):
        raise NotImplementedError("a region input that is not a tensor")
    with FakeTensorMode(allow_non_fake_inputs=True):  # shapes and dtypes only: no tensor memory
        fakes = tuple(torch.empty(tuple(v.shape), dtype=v.dtype, device="cpu") for v in vals)
    program = from_torch(sub, fakes, name=name)
    where, keep = _outputs(program)
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
    run = {"target": opts["target"], "hw": opts["hw"], "k": opts["k"], "precision": opts["precision"]}
    more = {"saturation_s": opts["saturation_s"], "baselines": REGION_BASELINES}
    if opts["remote"] is not None:
        root = Path(opts["remote"])
        bdir = bundle_path(program, **run, cache_dir=root)
        if region is not None:
            region.bundle = str(bdir)
        rows = bdir / ROWS_NAME
        if not rows.is_file():
            write_bundle_only(program, **run, cache_dir=root, device="cuda", **more)
            raise Unmeasured(f"not measured yet: its bundle is {bdir}; on a GPU run `python -m axon_eg.measure "
                             f"{root / 'bundles'}/*`, bring the rows back into it and build again")
        result = saturate_and_extract(program, **run, cache_dir=root, rows=rows, **more)
    else:
        result = saturate_and_extract(program, **run, budget_s=opts["budget_s"], cache_dir=opts["cache_dir"],
                                      device=opts["device"], **more)
    best = region_kernel(result)
    if best is None:
        if region is not None:
            region.why_torch = f"the selection is {result.best.id}"
        return None
    return RegionKernel(best, single, None if len(keep) == len(where) else where)


def region_kernel(result: Any) -> Any:
    """The kernel a region runs, or None for its eager code: the selection when it is a kernel; when it is a
    baseline, the fastest correct candidate that was timed faster than eager (a ``torch.compile`` baseline,
    from an earlier run of the same program, cannot stand in for a region), else None."""
    import polars as pl

    from axon_eg.selection import kernel_of

    if result.best.kind != "baseline":
        return result.best
    df = result.table.filter((pl.col("status") == "ok") & pl.col("median_us").is_not_null())
    eager = df.filter(pl.col("id") == "torch_eager")["median_us"].first()
    fast = df.filter((pl.col("kind") == "candidate") & (pl.col("median_us") < (eager if eager is not None else 0.0)))
    if fast.height == 0:
        return None
    return kernel_of(result.table, fast.sort("median_us")["id"][0], result.best.program, result.bundle)


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


def partition(module: torch.fx.GraphModule, max_ops: int = 24, max_contractions: int = 3) -> torch.fx.GraphModule:
    """``module`` with each maximal convex region of importable ``call_function`` nodes fused into
    submodules (``fused_0``, ``fused_1``, ...), a region of more than ``max_ops`` operations that compute
    (views aside) or ``max_contractions`` contractions (matmul, attention, convolution:
    ``aten_table.contracts``) cut into runs of its topological order within both where the fewest bytes
    cross (:func:`cut_region`): the enumerator's plans and tilings grow fast with a program's size, above all
    with its contractions (a whole decoder block, 67 ops, did not finish in 10 minutes; three linears sharing
    an input gave 16,632 candidates)."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner, Partition
    from torch.fx.passes.operator_support import OperatorSupportBase

    from axon_eg.ir.torch_import import _handler

    class Supported(OperatorSupportBase):
        def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: torch.fx.Node) -> bool:
            if node.op != "call_function":
                return False
            if node.target is operator.getitem:
                return isinstance(node.args[0], torch.fx.Node) and _handler(node.args[0].target) is not None
            return _handler(node.target) is not None and isinstance(node.meta.get("val"), (torch.Tensor, tuple, list))

    partitioner = CapabilityBasedPartitioner(module, Supported(), allows_single_node_partition=True)
    order = {n: i for i, n in enumerate(module.graph.nodes)}
    pieces: list[Partition] = []
    for part in partitioner.propose_partitions():
        runs = _views_to_readers(cut_region(sorted(part.nodes, key=order.__getitem__), max_ops, max_contractions))
        for chunk in runs:
            pieces.append(Partition(len(pieces), chunk))
    return partitioner.fuse_partitions(pieces)


def _views_to_readers(runs: list[list[torch.fx.Node]]) -> list[list[torch.fx.Node]]:
    """Each view (an op that moves no arithmetic) that only a later run reads, moved into that run: the run
    that computes its input then writes that value as computed (a GEMM's output as the library writes it)
    and the reader folds the view into its loads, where a view left as a region output would be a layout
    copy (``linear(h).view(b, s, heads, d).transpose(1, 2)`` feeding RoPE in the next region). Runs stay
    convex: the view's inputs are all in its own (earlier) run or outside the region."""
    runs = [list(r) for r in runs]
    order = {n: i for i, n in enumerate(n for r in runs for n in r)}
    owner = {n: k for k, r in enumerate(runs) for n in r}
    moved = True
    while moved:
        moved = False
        for k, run in enumerate(runs):
            for n in reversed(run):
                readers = {owner.get(u) for u in n.users}
                if _target(n) not in _moves_no_arithmetic() or len(readers) != 1:
                    continue
                later = next(iter(readers))
                if later is None or later <= k or any(owner.get(a, k) != k for a in n.all_input_nodes):
                    continue
                run.remove(n)
                runs[later] = sorted([*runs[later], n], key=order.__getitem__)
                owner[n] = later
                moved = True
    return [r for r in runs if r]


def cut_region(nodes: list[torch.fx.Node], max_ops: int, max_contractions: int = 3) -> list[list[torch.fx.Node]]:
    """``nodes`` (a region in topological order) cut into runs of that order (each convex) of at most
    ``max_ops`` computing ops and ``max_contractions`` contractions, moving the fewest bytes between runs: a
    run reads each value an earlier run made once, and writes each value a later run reads, unless the graph
    needs it anyway (it is read outside the region, so it is written regardless). So a cut falls between a
    residual add and the norm that reads it (one tensor moves), not inside the norm (its float32
    intermediates would). Never between a multi-output op and its ``getitem``. Ties go to fewer cuts; a run
    that cannot be cut is over the limit. Exact over all cut sets (dynamic programming over run ends)."""
    from axon_eg.ir.aten_table import contracts

    n = len(nodes)
    pos = {node: i for i, node in enumerate(nodes)}
    size = [_bytes(node) for node in nodes]
    uses = [sorted(pos[u] for u in node.users if u in pos) for node in nodes]
    exported = [any(u not in pos for u in node.users) for node in nodes]
    reads = [sorted({pos[a] for a in node.all_input_nodes if a in pos}) for node in nodes]
    ops, heavy = [0], [0]
    for node in nodes:
        ops.append(ops[-1] + _computes(node))
        heavy.append(heavy[-1] + (node.target is not operator.getitem and contracts(_target(node))))

    def moved(j: int, i: int) -> int:  # the run nodes[j:i]: what it reads from earlier runs and writes for later
        read = {v for k in range(j, i) for v in reads[k] if v < j}
        written = [k for k in range(j, i) if not exported[k] and uses[k] and uses[k][-1] >= i]
        return sum(size[v] for v in read) + sum(size[k] for k in written)

    def cuttable(j: int) -> bool:  # a cut before position j
        return nodes[j].target is not operator.getitem and \
            not any(u.target is operator.getitem for u in nodes[j - 1].users)

    over = 1 + 2 * sum(size) * max(1, n)  # any cut is better than a run over the limit
    best: list[tuple[int, int, int]] = [(0, 0, 0)] * (n + 1)  # (cost, cuts, start of the last run)
    for i in range(1, n + 1):
        options = []
        for j in range(i):
            if j and not cuttable(j):
                continue
            excess = max(0, ops[i] - ops[j] - max_ops) + max(0, heavy[i] - heavy[j] - max_contractions)
            options.append((best[j][0] + moved(j, i) + over * excess, best[j][1] + (1 if j else 0), j))
        best[i] = min(options)
    runs: list[list[torch.fx.Node]] = []
    i = n
    while i > 0:
        j = best[i][2]
        runs.append(nodes[j:i])
        i = j
    return runs[::-1]


def _bytes(node: torch.fx.Node) -> int:
    val = node.meta.get("val")
    vals = val if isinstance(val, (tuple, list)) else [val]
    return sum(v.numel() * v.element_size() for v in vals if isinstance(v, torch.Tensor))


def _computes(node: torch.fx.Node) -> bool:
    return node.target is not operator.getitem and _target(node) not in _moves_no_arithmetic()


def signature(args: tuple) -> tuple:
    """What a version is built for: each tensor's shape, dtype and device, each other argument itself."""
    return tuple((tuple(a.shape), a.dtype, a.device) if isinstance(a, torch.Tensor) else ("value", a) for a in args)


def _region_calls(fused: torch.fx.GraphModule) -> list[tuple[str, torch.fx.Node]]:
    return [(n.target, n) for n in fused.graph.nodes if n.op == "call_module" and str(n.target).startswith("fused_")]


def _wants_grad(gm: torch.nn.Module, args: tuple) -> bool:
    return any(isinstance(a, torch.Tensor) and a.requires_grad for a in args) or \
        any(p.requires_grad for p in gm.parameters())


def _target(node: torch.fx.Node) -> str:
    if node.target is operator.getitem:
        return "getitem"
    from axon_eg.ir.torch_import import _name

    return _name(node.target)


def _short(op: str) -> str:
    return op.removeprefix("aten.").removesuffix(".default")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:300]


__all__ = ["DEFAULTS", "REGION_BASELINES", "Compiled", "OptimizedModule", "Region", "RegionKernel", "Unmeasured",
           "backend", "compile_region", "cut_region", "optimize", "options", "partition", "region_kernel", "signature",
           "write_model_new"]
