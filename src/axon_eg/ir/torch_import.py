"""PyTorch front end: ``nn.Module`` objects and KernelBench problem files become Programs.

``from_torch(module, example_inputs)`` exports the module with ``torch.export`` (the training IR,
without decompositions, so ``aten.linear``, ``aten.softmax.int``, ``aten.layer_norm``,
``aten.conv2d`` and ``aten.scaled_dot_product_attention`` arrive whole) and maps each aten op
through ONE table, ``ATEN`` (:mod:`axon_eg.ir.aten_table`), onto registry ops. ``SUPPORTED_ATEN_OPS`` lists its keys; the
in-place variant of a supported op (``aten.relu_``, ``aten.add_``) is accepted too, unless a view
of the tensor it writes is read afterwards. Parameters and buffers become named inputs
("linear.weight") with roles "parameter" / "buffer" (only those the computation reads); user
inputs keep forward()'s argument names; shapes are the example inputs' concrete sizes.
``import_torch`` also returns the float64 values of the parameters and buffers.

Every node carries the user's source line (the innermost ``forward()`` frame that torch.export
records), and every error names the aten op and that line.

``load_problem(path)`` imports a KernelBench-format file (``class Model``, ``get_inputs()``,
``get_init_inputs()``) into a :class:`Problem` that keeps the module's parameter values, so that
``problem.reference(inputs)`` is the float64 answer every candidate kernel is checked against; it traces
``forward`` on fake inputs (shapes and dtypes, no memory), so loading never holds the inputs themselves;
``small_sizes(path)`` reads the file's ``SMALL_SIZES`` (constants for a quick run) without running it.

Refused, in one line naming the user's line: an in-place write into an input or a parameter
(``x.add_(1)``: a kernel does not write its inputs, so the caller would miss the change; a write into a
fresh tensor is fine, and buffer updates such as batch norm's running statistics are dropped),
data-dependent control flow (``if x.sum() > 0``) and ``.item()``. torch.export's own logging, warnings
and prints are captured while it runs and shown only when an export fails in a way this module cannot
name a user line for.

Modules: this one is the translation of an exported graph (``_Translator``) and the KernelBench loader;
:mod:`axon_eg.ir.torch_export` exports and diagnoses failures, :mod:`axon_eg.ir.aten_table` is the table
and :mod:`axon_eg.ir.aten_handlers` and :mod:`axon_eg.ir.aten_indexing` (index arithmetic: advanced indexing,
roll, diff, upsampling) its handlers; each name is imported from the module that defines it.
"""

from __future__ import annotations

import ast
import importlib.util
import itertools
import operator
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.node import Node, map_arg
from torch.overrides import TorchFunctionMode

from axon_eg.errors import AxonError, InvalidArgument, ProblemLoadError, ProgramError, ShapeError, UnsupportedOperation
from axon_eg.ir import dims as D
from axon_eg.ir.aten_handlers import Ctx, checked_dtype
from axon_eg.ir.aten_layout import PIECES
from axon_eg.ir.aten_table import (
    DATA_DEPENDENT,
    SUPPORTED_ATEN_OPS,
    VIEW_LIKE,
    aten_name,
    bind_schema,
    handler_for,
    writes_self,
)
from axon_eg.ir.builder import Builder, Value
from axon_eg.ir.inputs import random_inputs as _random_inputs
from axon_eg.ir.interpret import interpret
from axon_eg.ir.program import InputSpec, Program
from axon_eg.ir.torch_export import export_program, node_location


# ------------------------------------------------------------------------------------------------
# Export and translation
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class TorchImport:
    """A Program imported from torch, with the float64 values of its parameter and buffer inputs."""

    program: Program
    state: dict[str, np.ndarray]


def from_torch(module: torch.nn.Module | torch.export.ExportedProgram, example_inputs: Any, *,
               name: str | None = None) -> Program:
    """The Program computing ``module(*example_inputs)``, with the example inputs' concrete shapes."""
    return import_torch(module, example_inputs, name=name).program


def import_torch(module: torch.nn.Module | torch.export.ExportedProgram, example_inputs: Any, *,
                 name: str | None = None) -> TorchImport:
    """Like :func:`from_torch`, also returning the parameter and buffer values (float64, by input name)."""
    args = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    if isinstance(module, torch.export.ExportedProgram):
        ep, name = module, name or "program"
    else:
        name = name or type(module).__name__
        ep = export_program(module, args, name)
    return _Translator(ep, name).run()


_NO_EQUIVALENT = ("no axon_eg equivalent: write it with supported ops (axon_eg.ir.torch_import.SUPPORTED_ATEN_OPS "
                  "lists them), or compute it outside the module and pass the result in as an input")


class _Translator:
    def __init__(self, ep: torch.export.ExportedProgram, name: str):
        self.ep, self.name = ep, name
        self.graph_nodes = list(ep.graph.nodes)
        self.order = {n: i for i, n in enumerate(self.graph_nodes)}
        self.specs = {s.arg.name: s for s in ep.graph_signature.input_specs if hasattr(s.arg, "name")}
        self.b = Builder(name)
        self.env: dict[Node, Any] = {}
        self.roles: dict[str, str] = {}
        self.state: dict[str, np.ndarray] = {}
        self.made: set[str] = set()  # buffers of values made inside forward() (torch.arange)

    def run(self) -> TorchImport:
        mutated = getattr(self.ep.graph_signature, "user_inputs_to_mutate", {}) or {}
        for output_name, input_name in mutated.items():  # a functionalized graph: the write is an extra output
            producer = next((n for n in self.graph_nodes if n.name == output_name), None)
            self._refuse_mutation(input_name, producer if producer is not None and producer.op == "call_function"
                                  else None)
        resolved, outputs = self._functionalize()
        live = self._live(resolved, outputs)
        for node in self.graph_nodes:  # name an unsupported op before any dtype complaint about its inputs
            if node in live and node.op == "call_function" and node.target is not operator.getitem \
                    and handler_for(node.target) is None:
                why = DATA_DEPENDENT.get(aten_name(node.target), _NO_EQUIVALENT)
                raise Ctx(self.b, aten_name(node.target), node, node_location(node)).unsupported(why)
        self._inputs(live)
        for node in self.graph_nodes:
            if node.op == "call_function" and node in live:
                self.env[node] = self._translate(node, *resolved[node])
        results = []
        for spec, out in zip(self.ep.graph_signature.output_specs, outputs):
            if spec.kind == torch.export.graph_signature.OutputKind.USER_OUTPUT:
                value = self.env.get(out) if isinstance(out, Node) else out
                if not isinstance(value, Value):
                    raise ProgramError(f"{self.name}: forward() returns {value!r}; only tensor outputs are supported")
                results.append(value)
        if not results:
            raise ProgramError(f"{self.name}: forward() returns no tensor")
        program = self.b.build(results, roles=self.roles)
        return TorchImport(*_drop_unused_state(program, self.state))

    # In-place ops write a new version of their first argument: later readers see that version.
    def _functionalize(self) -> tuple[dict[Node, tuple[tuple, dict]], list[Any]]:
        version: dict[Node, Node] = {}

        def current(n: Node) -> Node:
            while n in version:
                n = version[n]
            return n

        resolved: dict[Node, tuple[tuple, dict]] = {}
        outputs: list[Any] = []
        for node in self.graph_nodes:
            if node.op == "call_function":
                resolved[node] = map_arg((node.args, node.kwargs), current)  # type: ignore[assignment]
                if writes_self(node.target) and isinstance(node.args[0], Node):
                    self._check_not_an_input(node)
                    target = current(node.args[0])
                    self._check_no_alias(node, target)
                    version[target] = node
            elif node.op == "output":
                outputs = list(map_arg(node.args[0], current))
        return resolved, outputs

    def _check_not_an_input(self, node: Node) -> None:
        """Refuse an in-place write into forward()'s argument or a parameter (or a view of one): the caller
        would see the change, and a kernel does not write its inputs. Buffer updates (batch norm's
        ``num_batches_tracked += 1`` in training mode) are state bookkeeping, dropped like the running stats."""
        root = node.args[0]
        while isinstance(root, Node) and root.op == "call_function" and isinstance(root.args[0], Node) and (
                aten_name(root.target) in VIEW_LIKE or writes_self(root.target)):
            root = root.args[0]
        kinds = torch.export.graph_signature.InputKind
        if isinstance(root, Node) and root.op == "placeholder" and root.name in self.specs and \
                self.specs[root.name].kind in (kinds.USER_INPUT, kinds.PARAMETER):
            self._refuse_mutation(root.name, node)

    def _refuse_mutation(self, placeholder: str, node: Node | None) -> None:
        kinds = torch.export.graph_signature.InputKind
        spec = self.specs.get(placeholder)
        if spec is None or spec.kind == kinds.USER_INPUT:
            what = f"its input {placeholder!r}"
        else:
            what = f"its {spec.kind.name.lower().replace('_', ' ')} {spec.target!r}"
        op = aten_name(node.target) if node is not None else "an in-place op"
        location = node_location(node) if node is not None else None
        at = f"{op} at {location}" if location else op
        raise UnsupportedOperation(f"{self.name}: forward() writes {what} in place ({at}), which is not supported: "
                                   "a kernel does not modify its inputs; use the out-of-place op (x = x + 1, not "
                                   "x.add_(1)) or clone() first", op=op, location=location)

    def _check_no_alias(self, node: Node, mutated: Node) -> None:
        """Refuse an in-place write when a tensor sharing memory with ``mutated`` is read afterwards."""
        root = mutated
        while root.op == "call_function" and aten_name(root.target) in VIEW_LIKE and isinstance(root.args[0], Node):
            root = root.args[0]
        group: set[Node] = set()
        stack = [root]
        while stack:
            n = stack.pop()
            if n not in group:
                group.add(n)
                stack.extend(u for u in n.users if aten_name(u.target) in VIEW_LIKE)
        group.discard(mutated)  # later reads of the mutated tensor itself see the new version
        if any(self.order[u] > self.order[node] for alias in group for u in alias.users if u is not node):
            raise Ctx(self.b, aten_name(node.target), node, node_location(node)).unsupported(
                "writes in place into a tensor that shares memory with a view read later; use the out-of-place op")

    def _live(self, resolved: dict[Node, tuple[tuple, dict]], outputs: list[Any]) -> set[Node]:
        live: set[Node] = set()
        stack = [o for o in outputs if isinstance(o, Node)]
        while stack:
            n = stack.pop()
            if n in live:
                continue
            live.add(n)
            if n in resolved:
                map_arg(resolved[n], stack.append)
        return live

    def _inputs(self, live: set[Node]) -> None:
        kinds = torch.export.graph_signature.InputKind
        placeholders = [n for n in self.graph_nodes if n.op == "placeholder"]
        users = [n for n in placeholders if self.specs[n.name].kind == kinds.USER_INPUT]
        state = [n for n in placeholders if self.specs[n.name].kind != kinds.USER_INPUT and n in live]
        for n in users + state:  # user inputs first, in forward() order; then parameters and buffers
            spec, val = self.specs[n.name], n.meta.get("val")
            if not isinstance(val, torch.Tensor):
                self.env[n] = val  # a Python number: torch.export specialized the graph on it
                continue
            if spec.kind == kinds.USER_INPUT:
                name = n.name
                self.env[n] = self.b.input(name, tuple(val.shape), checked_dtype(val.dtype, f"{self.name}: input {name!r}"))
                continue
            if spec.kind not in (kinds.PARAMETER, kinds.BUFFER, kinds.CONSTANT_TENSOR):
                raise UnsupportedOperation(f"{self.name}: graph input {n.name!r} of kind {spec.kind.name}",
                                           op=spec.kind.name)
            value = self.ep.state_dict[spec.target] if spec.target in self.ep.state_dict \
                else self.ep.constants[spec.target]
            what = f"{self.name}: {spec.kind.name.lower().replace('_', ' ')} {spec.target!r}"
            if spec.kind == kinds.CONSTANT_TENSOR and value.ndim == 0:  # torch.tensor(2.0) in forward()
                self.env[n] = self.b.constant(float(value), checked_dtype(value.dtype, what))
                continue
            if value.is_meta:
                raise InvalidArgument(f"{what} is on the meta device (shapes only, no values): ax.from_torch needs the "
                                      "model's weights; for phase 1 on shapes alone use ax.optimize(model, inputs, "
                                      "remote=DIR) or torch.compile(model, backend='axon_eg', options={'remote': DIR})")
            self.env[n] = self.b.input(spec.target, tuple(value.shape), checked_dtype(value.dtype, what))
            self.roles[spec.target] = "parameter" if spec.kind == kinds.PARAMETER else "buffer"
            self.state[spec.target] = value.detach().to("cpu", torch.float64).numpy()

    def _made_buffer(self, stem: str, values: Any, dtype: Any) -> Value:
        """A buffer input holding values made inside forward() (``torch.arange``), named apart from the rest."""
        k = 0
        while f"_{stem}{k}" in self.state or f"_{stem}{k}" in self.specs:
            k += 1
        name = f"_{stem}{k}"
        self.made.add(name)
        self.roles[name] = "buffer"
        self.state[name] = np.asarray(values, dtype=np.float64)
        return self.b.input(name, tuple(self.state[name].shape), dtype)

    def _made_values(self, name: str) -> np.ndarray | None:
        """The values of a buffer made inside forward(): constants of the program (a parameter's or a module
        buffer's values are not: they are the caller's, and may change between calls)."""
        return self.state[name] if name in self.made else None

    def _translate(self, node: Node, args: tuple, kwargs: dict) -> Any:
        aten, location = aten_name(node.target), node_location(node)
        args, kwargs = map_arg((args, kwargs), self.env.__getitem__)  # type: ignore[assignment]
        cx = Ctx(self.b, aten, node, location, self._made_buffer, self._made_values)
        if node.target is operator.getitem:
            value = args[0][args[1]]
            if value is None:
                producer = aten_name(node.args[0].target)  # type: ignore[union-attr]
                why = (f"its output {args[1]} is empty and used; axon_eg has no empty tensors"
                       if producer in PIECES else
                       f"its output {args[1]} (indices) is used; axon_eg imports only the values output")
                raise Ctx(self.b, producer, node, location).unsupported(why)
            return value
        handler = handler_for(node.target)
        assert handler is not None  # checked in run()
        with self.b.at(location):
            return self._conform(cx, handler(cx, bind_schema(node.target, args, kwargs)), node.meta.get("val"))

    def _conform(self, cx: Ctx, value: Any, val: Any) -> Any:
        """Check a handler's result against torch's own shape; cast where torch's dtype rule differs."""
        if value is None or val is None:
            return value
        if isinstance(value, tuple):
            return tuple(self._conform(cx, v, t) for v, t in zip(value, val))
        want = tuple(int(d) for d in val.shape)
        if value.shape != want:
            raise ShapeError(f"{cx.where}: imported with shape {D.format_shape(value.shape)}, "
                             f"torch computes {list(want)} (an axon_eg import bug)")
        dtype = checked_dtype(val.dtype, f"{cx.where}: its result")
        return value if value.dtype == dtype else cx.emit("cast", value, dtype=dtype)


def _drop_unused_state(program: Program, state: dict[str, np.ndarray]) -> tuple[Program, dict[str, np.ndarray]]:
    """Rebuild without parameter/buffer inputs no op reads and no output is (e.g. running stats of training batch
    norm); one that is an output stays (a region that hands a parameter on, as T5's relative position bias)."""
    users = program.users()
    outputs = set(program.outputs)
    unused = {n.attrs["name"] for i, n in enumerate(program.nodes)
              if n.op == "input" and not users[i] and i not in outputs and n.attrs["name"] in state}
    if not unused:
        return program, state
    b = Builder(program.name)
    values: dict[int, Value] = {}
    for i, n in enumerate(program.nodes):
        if n.op == "input":
            if n.attrs["name"] not in unused:
                values[i] = b.input(n.attrs["name"], n.shape, n.dtype)
            continue
        with b.at(program.location(i)):
            values[i] = b.emit(n.op, *[values[j] for j in n.inputs], **dict(n.attrs))
    roles = {k: v for k, v in program.roles if k not in unused}
    kept = b.build([values[o] for o in program.outputs], roles=roles)
    return kept, {k: v for k, v in state.items() if k not in unused}


# ------------------------------------------------------------------------------------------------
# KernelBench problem files
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Problem:
    """A KernelBench-format problem: the Program, its module and the module's parameter values."""

    path: Path
    program: Program
    inputs: list[InputSpec]
    parameters: dict[str, np.ndarray]  # float64 values of the parameter and buffer inputs, by name
    example_inputs: tuple  # what get_inputs() returns, its tensors fake (shape and dtype, no memory)
    module: torch.nn.Module
    _make_inputs: Callable[[], tuple] = field(repr=False, default=tuple)

    def file_inputs(self) -> tuple:
        """``get_inputs()`` run for real (on the CPU, the RNG where loading left it, so the same values on
        every call): the file's own example inputs, at the sizes the problem was loaded with."""
        return self._make_inputs()

    @property
    def user_inputs(self) -> list[InputSpec]:
        return [s for s in self.inputs if s.role == "input"]

    def _all_inputs(self, user_inputs: Mapping[str, Any] | Sequence[Any]) -> dict[str, Any]:
        if isinstance(user_inputs, Mapping):
            return {**self.parameters, **user_inputs}
        names = [s.name for s in self.user_inputs]
        if len(user_inputs) != len(names):
            raise ProgramError(f"{self.program.name}: takes {len(names)} user inputs ({', '.join(names)}), "
                               f"got {len(user_inputs)}")
        return {**self.parameters, **dict(zip(names, user_inputs))}

    def reference(self, user_inputs: Mapping[str, Any] | Sequence[Any]) -> np.ndarray:
        """The float64 result for these user inputs (by name, or positionally) and the stored parameters."""
        return interpret(self.program, self._all_inputs(user_inputs))  # type: ignore[return-value]

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Every program input: user inputs random (never zero), parameters and buffers the module's own."""
        return {**_random_inputs(self.program, seed), **self.parameters}


_counter = itertools.count()


def small_sizes(path: str | os.PathLike[str]) -> dict[str, int] | None:
    """A KernelBench file's ``SMALL_SIZES`` (module-level constants to set for a quick run, e.g.
    ``SMALL_SIZES = {"batch_size": 2, "hidden_size": 16}``), read without running the file; None when
    it defines none. A SMALL_SIZES that is not a literal dict of names to ints >= 1 is a ProblemLoadError."""
    path = Path(path)
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as e:
        raise ProblemLoadError(f"{e.filename or path}:{e.lineno}: syntax error: {e.msg}") from None
    except OSError as e:
        raise ProblemLoadError(f"{path}: cannot read it ({e.strerror or e})") from None
    found = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "SMALL_SIZES" for t in node.targets):
            found = node
    if found is None:
        return None
    try:
        value = ast.literal_eval(found.value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        value = None
    ok = isinstance(value, dict) and all(isinstance(k, str) and type(v) is int and v >= 1 for k, v in value.items())
    if not ok:
        raise ProblemLoadError(f"{path}:{found.lineno}: SMALL_SIZES must be a literal dict of module-level names to "
                               "ints >= 1, e.g. {\"batch_size\": 2}")
    return dict(value)  # type: ignore[arg-type]


def load_problem(path: str | os.PathLike[str], *, sizes: Mapping[str, int] | None = None) -> Problem:
    """Import a KernelBench file: ``Model(*get_init_inputs())`` applied to ``get_inputs()``.

    torch is seeded with 0 (on a forked RNG) before the model is made; its parameters are real values.
    ``forward`` is traced on ``get_inputs()`` run under a fake-tensor mode: shapes and dtypes only, so a
    problem whose inputs would take 40 GB loads in the memory of its parameters
    (``Problem.file_inputs()`` makes the real ones). A file written for a GPU (``.cuda()``,
    ``device="cuda"``) loads on the CPU. ``sizes`` overrides module-level constants (``batch_size=4``)
    before either function runs. The module is used in the mode its constructor leaves it (training, as
    KernelBench evaluates it): batch norm then normalizes with batch statistics."""
    path = Path(path)
    if not path.is_file():
        raise ProblemLoadError(f"{path}: no such problem file")
    stem = re.sub(r"\W", "_", path.stem)
    module_name = f"axon_eg_problem_{stem}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ProblemLoadError(f"{path}: cannot be imported as a Python module")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = mod
    try:
        spec.loader.exec_module(mod)
    except SyntaxError as e:
        raise ProblemLoadError(f"{e.filename or path}:{e.lineno}: syntax error: {e.msg}") from None
    except Exception as e:  # noqa: BLE001 - any failure at import time is the file's
        raise ProblemLoadError(f"{path}: importing it raised {type(e).__name__}: {e}") from e
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(mod, n)]
    if missing:
        raise ProblemLoadError(f"{path}: missing {', '.join(missing)} (a KernelBench problem defines "
                               "class Model(nn.Module), get_inputs() and get_init_inputs())")
    if not (isinstance(mod.Model, type) and issubclass(mod.Model, torch.nn.Module)):
        raise ProblemLoadError(f"{path}: Model must be a torch.nn.Module subclass, got {mod.Model!r}")
    for key, value in (sizes or {}).items():
        if not hasattr(mod, key):
            raise ProblemLoadError(f"{path}: sizes names {key!r}, which the file does not define")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ProblemLoadError(f"{path}: sizes[{key!r}] must be an int >= 1, got {value!r}")
        setattr(mod, key, value)

    def call(what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as e:  # noqa: BLE001
            raise ProblemLoadError(f"{path}: {what} raised {type(e).__name__}: {e}") from e

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        with _OnTheCpu():
            init = call("get_init_inputs()", mod.get_init_inputs)
            model = call("Model(*get_init_inputs())", lambda: mod.Model(*init))
        rng = torch.get_rng_state()
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    with fake, _OnTheCpu():  # shapes and dtypes only, whatever the size
        example = tuple(call("get_inputs()", mod.get_inputs))

    def make_inputs() -> tuple:
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(rng)
            with _OnTheCpu():
                return tuple(call("get_inputs()", mod.get_inputs))

    imported = _import_with_scalar_inputs(model, example, path.stem, fake)
    return Problem(path, imported.program, imported.program.inputs, imported.state, example, model, make_inputs)


def _import_with_scalar_inputs(model: torch.nn.Module, example: tuple, name: str, fake: FakeTensorMode) -> TorchImport:
    """Import with each Python float of ``get_inputs()`` (``forward(A, s)``) as a rank-0 fp32 program input,
    so the kernel takes it at call time; where ``forward`` uses it as a Python number (``if s > 2``,
    ``range(s)``), that fails to trace and the float is baked in as torch.export specializes it."""
    floats = [k for k, v in enumerate(example) if isinstance(v, float)]
    if not floats:
        return import_torch(model, example, name=name)
    with fake:  # the mode the other example inputs are fake in
        lifted = tuple(torch.tensor(v, dtype=torch.float32) if k in floats else v for k, v in enumerate(example))
    try:
        return import_torch(model, lifted, name=name)
    except (AxonError, RuntimeError, TypeError, ValueError):
        return import_torch(model, example, name=name)


def _on_cpu(device: Any) -> Any:
    """``device`` with a CUDA device made the CPU (a string, a torch.device or an ordinal)."""
    if isinstance(device, int) or (isinstance(device, (str, torch.device)) and torch.device(device).type == "cuda"):
        return torch.device("cpu")
    return device


class _OnTheCpu(TorchFunctionMode):
    """A problem file written for a GPU (``torch.randn(n, device="cuda")``, ``x.cuda()``, ``x.to("cuda")``)
    run on the CPU: phase 1 needs no GPU (its inputs are fake anyway, and parameters are read back as
    float64 NumPy arrays)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in (torch.Tensor.cuda, torch.nn.Module.cuda):
            return args[0]
        if "device" in kwargs:
            kwargs["device"] = _on_cpu(kwargs["device"])
        if func is torch.Tensor.to and len(args) > 1 and not isinstance(args[1], (torch.dtype, torch.Tensor)):
            args = (args[0], _on_cpu(args[1]), *args[2:])
        return func(*args, **kwargs)


__all__ = ["SUPPORTED_ATEN_OPS", "Problem", "TorchImport", "from_torch", "import_torch", "load_problem", "small_sizes"]
