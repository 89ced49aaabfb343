"""The tensor IR handed between stages: an immutable DAG of registry ops over symbolic dims.

A :class:`Program` is a tuple of :class:`Node` in topological order, the ids of its outputs and the
sizes bound to its named dims. It has a content hash that is stable across processes and machines
(SHA-256 of a canonical JSON form), a readable ``str``, and a JSON round-trip. Programs are built
with a :class:`Builder` (:mod:`axon_eg.ir.builder`, re-exported here), which validates every op
against the registry, infers shapes and dtypes, and shares identical nodes (hash-consing).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from axon_eg.errors import AxonError, ProgramError, ShapeError
from axon_eg.ir import dims as D
from axon_eg.ir import ops as O
from axon_eg.ir.dims import Dim, Shape
from axon_eg.ir.dtypes import DType
from axon_eg.ir.library_ops import BIAS_AFTER

if TYPE_CHECKING:
    from axon_eg.ir.builder import Builder, Value, as_shape

JSON_VERSION = 1


@dataclass(frozen=True)
class Node:
    op: str
    inputs: tuple[int, ...]
    attrs: O.Attrs
    shape: Shape
    dtype: DType

    @property
    def kind(self) -> O.OpKind:
        """The op's kind in the registry (``OpKind``: source, elementwise, reduce, scan, contraction, ...)."""
        return O.get(self.op).kind

    @property
    def is_input(self) -> bool:
        """A program input (bound by the caller, named by ``attrs["name"]``)."""
        return self.op == "input"

    @property
    def is_constant(self) -> bool:
        """A scalar constant (``attrs["value"]``)."""
        return self.op == "constant"


FROZEN = "frozen"
"""The role of module state the caller promises not to change behind the tensor's version counter (no writes
through ``.data``): a kernel may compute what depends on it alone once per version and reuse it
(``FusionPlan.static_groups``). Given by ``Program.frozen()`` and the ``freeze`` option."""


@dataclass(frozen=True)
class InputSpec:
    """What the harness needs to make one input: name, symbolic shape, dtype, role."""

    name: str
    shape: Shape
    dtype: DType
    role: str = "input"  # "input" (user data), "parameter" or "buffer" (module state), FROZEN (``Program.frozen``)


@dataclass(frozen=True, eq=False)
class Program:
    nodes: tuple[Node, ...]
    outputs: tuple[int, ...]
    dims: tuple[tuple[str, int], ...] = ()
    name: str = "program"
    roles: tuple[tuple[str, str], ...] = ()  # input name -> role, when not "input"
    locations: tuple[str | None, ...] = field(default=(), compare=False)  # user source line per node

    def frozen(self) -> Program:
        """The program with its ``parameter`` and ``buffer`` inputs marked :data:`FROZEN` (a different
        program: its hash, and so its cache keys, change with the roles)."""
        roles = tuple((k, FROZEN if v in ("parameter", "buffer") else v) for k, v in self.roles)
        return replace(self, roles=roles)

    # -- identity ------------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        return isinstance(other, Program) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    @cached_property
    def _key(self) -> tuple:
        return (self.nodes, self.outputs, self.dims, self.roles)

    @cached_property
    def hash(self) -> str:
        """SHA-256 of the canonical JSON of nodes, outputs, dim bindings and roles (not name, not lines)."""
        body = self._canonical(include_meta=False)
        text = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    # -- views ---------------------------------------------------------------------------------
    @property
    def bindings(self) -> dict[str, int]:
        return dict(self.dims)

    @property
    def input_ids(self) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if n.op == "input"]

    @property
    def inputs(self) -> list[InputSpec]:
        roles = dict(self.roles)
        return [
            InputSpec(n.attrs["name"], n.shape, n.dtype, roles.get(n.attrs["name"], "input"))
            for n in self.nodes if n.op == "input"
        ]

    @property
    def free_dims(self) -> set[str]:
        out: set[str] = set()
        for n in self.nodes:
            for d in n.shape:
                out |= D.names(d)
        return out

    def concrete_shape(self, node: int) -> tuple[int, ...]:
        shapes = self._concrete_shapes
        got = shapes.get(node)
        if got is None:
            got = shapes[node] = tuple(D.evaluate(d, self.bindings) for d in self.nodes[node].shape)
        return got

    @cached_property
    def _concrete_shapes(self) -> dict[int, tuple[int, ...]]:
        """``concrete_shape`` per node, filled as asked (a program is immutable; the cost model asks a
        node's shape thousands of times)."""
        return {}

    def output_shapes(self) -> list[tuple[int, ...]]:
        return [self.concrete_shape(o) for o in self.outputs]

    def users(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in self.nodes]
        for i, n in enumerate(self.nodes):
            for j in n.inputs:
                out[j].append(i)
        return out

    def location(self, node: int) -> str | None:
        return self.locations[node] if node < len(self.locations) else None

    # -- transformations -----------------------------------------------------------------------
    def bind(self, sizes: Mapping[str, int] | None = None, /, **more: int) -> Program:
        """A copy with dims bound to sizes (earlier bindings kept unless overridden).

        Every node's shape rule is re-run on the concrete shapes, so a size that breaks the program
        (a reshape that no longer adds up, a slice past the end) is reported with its op."""
        merged = {**self.bindings, **(sizes or {}), **more}
        unknown = sorted(set(merged) - self.free_dims)
        if unknown:
            raise ProgramError(f"{self.name}: no dim named {unknown[0]!r}; dims are {sorted(self.free_dims)}")
        for k, v in merged.items():
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ProgramError(f"{self.name}: dim {k} must be bound to an int >= 1, got {v!r}")
        program = Program(self.nodes, self.outputs, tuple(sorted(merged.items())), self.name, self.roles,
                          self.locations)
        program.check_bound()
        return program

    def specialize(self, sizes: Mapping[str, int]) -> Program:
        """The program with the named dims replaced by their sizes in every shape and attribute
        (re-checked by the Builder); other bindings are kept. ``specialize_unit_dims`` uses it."""
        subst = {k: v for k, v in sizes.items() if k in self.free_dims}
        if not subst:
            return self
        b = _builder.Builder(self.name)
        values: list[Value] = []
        for i, n in enumerate(self.nodes):
            with b.at(self.location(i)):
                if n.op == "input":
                    values.append(b.input(n.attrs["name"], tuple(D.substitute(d, subst) for d in n.shape), n.dtype))
                else:
                    attrs = {k: _substitute_attr(v, subst) for k, v in n.attrs.items()}
                    values.append(b.emit(n.op, *[values[j] for j in n.inputs], **attrs))
        rest = {k: v for k, v in self.bindings.items() if k not in subst}
        program = b.build([values[o] for o in self.outputs], roles=dict(self.roles))
        return program.bind(rest) if rest else program

    def specialize_unit_dims(self) -> Program:
        """Named dims bound to 1 become the literal 1: a size-1 axis broadcasts and can be squeezed,
        which only the literal says (batch 1, one decode step). Variants of the νGraph are built on
        this program, so a rule proved for ``dim = 1`` matches exactly where the variant has 1."""
        return self.specialize({k: v for k, v in self.bindings.items() if v == 1})

    def nest_wide(self, max_inputs: int) -> Program:
        """The same program with every node of a nestable op (``ops.nestable()``: concat) that has more than
        ``max_inputs`` inputs replaced by a balanced tree of that op, with the same attributes, over consecutive
        groups of its inputs (a group of one is the input itself). Concat along one axis is associative: the
        tree is an exact identity, element for element, with no arithmetic and no rounding, so no rewrite rule
        or proof is involved. Inputs of mixed dtypes are cast to the node's (promoted) dtype first, as the node
        itself converts them, so no inner node rounds to a dtype of its own group (int64 and fp16 would be
        fp16). The νGraph calls it with the widest input count its constructors take (DenseNet / Inception
        concat 9 to 35 tensors); the other nodes are kept as they are."""
        if max_inputs < 2:
            raise ValueError(f"nest_wide: max_inputs must be >= 2, got {max_inputs}")
        nestable = set(O.nestable())
        if not any(n.op in nestable and len(n.inputs) > max_inputs for n in self.nodes):
            return self
        b = _builder.Builder(self.name)

        def tree(op: str, args: list[Value], attrs: dict[str, Any]) -> Value:
            if len(args) <= max_inputs:
                return b.emit(op, *args, **attrs)
            q, r = divmod(len(args), max_inputs)  # max_inputs groups, sizes q + 1 (the first r) and q >= 1
            groups, start = [], 0
            for g in range(max_inputs):
                size = q + (g < r)
                groups.append(args[start] if size == 1 else tree(op, args[start:start + size], attrs))
                start += size
            return b.emit(op, *groups, **attrs)

        values: list[Value] = []
        for i, n in enumerate(self.nodes):
            with b.at(self.location(i)):
                if n.op == "input":
                    values.append(b.input(n.attrs["name"], n.shape, n.dtype))
                else:
                    args = [values[j] for j in n.inputs]
                    if n.op in nestable and len(args) > max_inputs:
                        args = [x if x.dtype == n.dtype else b.emit("cast", x, dtype=n.dtype) for x in args]
                        values.append(tree(n.op, args, dict(n.attrs)))
                    else:
                        values.append(b.emit(n.op, *args, **dict(n.attrs)))
        return b.build([values[o] for o in self.outputs], dims=self.bindings, roles=dict(self.roles))

    def check_bound(self) -> None:
        """Re-infer every shape with the bound sizes; raise naming the first op that does not fit."""
        bound = self.bindings
        shapes: list[tuple[int, ...] | None] = []  # None: depends on a dim not bound yet
        for n in self.nodes:
            op = O.get(n.op)
            try:
                want = tuple(D.evaluate(d, bound) for d in n.shape)
            except ShapeError:
                want = None
            ins = tuple(shapes[j] for j in n.inputs)
            if want is None or any(s is None for s in ins):
                shapes.append(None)
                continue
            attrs = n.attrs
            if n.op == "input":
                got = want
            else:
                try:
                    attrs = _bind_attrs(n.attrs, bound)
                    if op.canon is not None:
                        attrs = op.canon(ins, attrs)
                    got = tuple(D.evaluate(d, bound) for d in op.shape(ins, attrs))
                except ShapeError as e:
                    raise ShapeError(f"{_describe(n, ins)} with {_fmt_bind(bound)}: {e}") from None
            if got != want or any(d < 1 for d in want):
                raise ShapeError(
                    f"{_describe(n, ins)} with {_fmt_bind(bound)} gives shape {list(got)}, "
                    f"expected {list(want)} (sizes must be >= 1)"
                )
            shapes.append(want)

    def expand(self) -> Program:
        """The same program with every composite op replaced by its primitives (recursively), and a
        convolution's bias as an add after it (``library_ops``: the fused epilogue adds it)."""
        if not any(O.get(n.op).kind is O.OpKind.COMPOSITE or (n.op in BIAS_AFTER and len(n.inputs) == 3)
                   for n in self.nodes):
            return self
        b = _builder.Builder(self.name, expand_composites=True)
        values: list[Value] = []
        for i, n in enumerate(self.nodes):
            args = [values[j] for j in n.inputs]
            with b.at(self.location(i)):
                if n.op == "input":
                    v = b.input(n.attrs["name"], n.shape, n.dtype)
                else:
                    v = b.emit(n.op, *args, **dict(n.attrs))
            values.append(v)
        return b.build([values[o] for o in self.outputs], dims=self.bindings, roles=dict(self.roles))

    def canonical(self) -> Program:
        """The same program with nodes in a canonical order: inputs first (in their order), then a
        post-order walk from the outputs, operands left to right. Equal computations built in a
        different order compare equal after this."""
        b = _builder.Builder(self.name)
        values: dict[int, Value] = {}
        for i, n in enumerate(self.nodes):
            if n.op == "input":
                with b.at(self.location(i)):
                    values[i] = b.input(n.attrs["name"], n.shape, n.dtype)

        def visit(root: int) -> Value:
            stack = [(root, False)]
            while stack:
                i, ready = stack.pop()
                if i in values:
                    continue
                n = self.nodes[i]
                if not ready:
                    stack.append((i, True))
                    stack.extend((j, False) for j in reversed(n.inputs) if j not in values)
                    continue
                with b.at(self.location(i)):
                    values[i] = b.emit(n.op, *[values[j] for j in n.inputs], **dict(n.attrs))
            return values[root]

        outputs = [visit(o) for o in self.outputs]
        return b.build(outputs, dims=self.bindings, roles=dict(self.roles))

    # -- JSON ----------------------------------------------------------------------------------
    def _canonical(self, include_meta: bool = True) -> dict[str, Any]:
        body: dict[str, Any] = {
            "version": JSON_VERSION,
            "nodes": [
                {"op": n.op, "inputs": list(n.inputs), "attrs": {k: _attr_to_json(v) for k, v in n.attrs.items()},
                 "shape": [str(d) for d in n.shape], "dtype": n.dtype.name}
                for n in self.nodes
            ],
            "outputs": list(self.outputs),
            "dims": dict(self.dims),
            "roles": dict(self.roles),
        }
        if include_meta:
            body["name"] = self.name
            body["locations"] = list(self.locations)
        return body

    def to_json(self) -> str:
        return json.dumps(self._canonical(), indent=1, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> Program:
        """Rebuild and re-validate a Program; malformed input raises ProgramError naming the node."""
        try:
            body = json.loads(text)
        except json.JSONDecodeError as e:
            raise ProgramError(f"program JSON is not valid JSON: {e}") from None
        if not isinstance(body, dict) or body.get("version") != JSON_VERSION:
            raise ProgramError(f"program JSON must be an object with version {JSON_VERSION}")
        b = _builder.Builder(body.get("name", "program"))
        values: list[Value] = []
        locations = body.get("locations") or []
        try:
            for i, raw in enumerate(body["nodes"]):
                loc = locations[i] if i < len(locations) else None
                with b.at(loc):
                    op = O.get(raw["op"])
                    attrs = {k: _attr_from_json(op, k, v) for k, v in raw["attrs"].items()}
                    if any(j >= i or j < 0 for j in raw["inputs"]):
                        raise ProgramError(f"node {i} ({raw['op']}) refers to a node that does not precede it")
                    v = b.emit(raw["op"], *[values[j] for j in raw["inputs"]], **attrs)
                    want = tuple(D.parse_dim(d) for d in raw["shape"])
                    if v.shape != want or v.dtype.name != raw["dtype"]:
                        raise ProgramError(
                            f"node {i} ({raw['op']}): stored shape/dtype {raw['shape']} {raw['dtype']} "
                            f"disagree with the op's rules ({D.format_shape(v.shape)} {v.dtype})"
                        )
                values.append(v)
            outputs = [values[o] for o in body["outputs"]]
        except (KeyError, TypeError, IndexError) as e:
            raise ProgramError(f"program JSON is missing or has a malformed field: {e!r}") from None
        program = b.build(outputs, roles=body.get("roles", {}))
        if len(program.nodes) != len(body["nodes"]):
            raise ProgramError("program JSON has duplicate or unused nodes")
        return program.bind(body.get("dims", {})) if body.get("dims") else program

    # -- printing ------------------------------------------------------------------------------
    def __str__(self) -> str:
        names = self._names()
        roles = dict(self.roles)
        bound = self.bindings

        def ty(n: Node) -> str:
            return f"{n.dtype}{D.format_shape(n.shape)}"

        params = []
        for n in self.nodes:
            if n.op == "input":
                role = roles.get(n.attrs["name"])
                params.append(f"{n.attrs['name']}: {ty(n)}" + (f" ({role})" if role else ""))
        outs = ", ".join(ty(self.nodes[o]) for o in self.outputs)
        head = f"program {self.name}({', '.join(params)}) -> {outs}"
        if bound:
            head += "  where " + ", ".join(f"{k}={v}" for k, v in sorted(bound.items()))
        lines = [head]
        for i, n in enumerate(self.nodes):
            if n.op == "input":
                continue
            if n.op == "constant":
                continue
            args = [names[j] for j in n.inputs]
            args += [f"{k}={_attr_str(v)}" for k, v in n.attrs.items()]
            lines.append(f"  {names[i]} = {n.op}({', '.join(args)})".ljust(48) + f" : {ty(n)}")
        lines.append("  return " + ", ".join(names[o] for o in self.outputs))
        return "\n".join(lines)

    def _names(self) -> list[str]:
        names = []
        for i, n in enumerate(self.nodes):
            if n.op == "input":
                names.append(n.attrs["name"])
            elif n.op == "constant":
                names.append(_attr_str(n.attrs["value"]))
            else:
                names.append(f"%{i}")
        return names

    def __repr__(self) -> str:
        return f"<Program {self.name}: {len(self.nodes)} nodes, hash {self.hash[:12]}>"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython
        p.text(str(self))


def _describe(n: Node, in_shapes: Sequence[Shape]) -> str:
    return f"{n.op}({', '.join(D.format_shape(s) for s in in_shapes)})"


def _fmt_bind(bound: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(bound.items())) or "no bindings"


def _bind_attrs(attrs: O.Attrs, bound: Mapping[str, int]) -> O.Attrs:
    def conv(v: Any) -> Any:
        if isinstance(v, D.Sym):
            return D.evaluate(v, bound)
        if isinstance(v, tuple) and any(isinstance(x, D.Sym) for x in v):
            return tuple(conv(x) for x in v)
        return v

    return O.Attrs(tuple((k, conv(v)) for k, v in attrs.items()))


def _substitute_attr(v: Any, subst: Mapping[str, int]) -> Any:
    if isinstance(v, D.Sym):
        return D.substitute(v, subst)
    if isinstance(v, tuple) and any(isinstance(x, D.Sym) for x in v):
        return tuple(_substitute_attr(x, subst) for x in v)
    return v


def _attr_str(v: Any) -> str:
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, tuple):
        return "(" + ", ".join(_attr_str(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    return str(v)


def _attr_to_json(v: Any) -> Any:
    if isinstance(v, DType):
        return v.name
    if isinstance(v, D.Sym):
        return {"dim": str(v)}
    if isinstance(v, float):
        return v if math.isfinite(v) else {"float": "inf" if v > 0 else "-inf"}
    if isinstance(v, tuple):
        return [_attr_to_json(x) for x in v]
    return v


def _attr_from_json(op: O.OpDef, key: str, v: Any) -> Any:
    if isinstance(v, dict) and "dim" in v:
        return D.parse_dim(v["dim"])
    if isinstance(v, dict) and "float" in v:
        return float(v["float"])
    if isinstance(v, list):
        return tuple(_attr_from_json(op, key, x) for x in v)
    return v


def __getattr__(name: str) -> Any:
    """``Builder``, ``Value`` and ``as_shape`` live in :mod:`axon_eg.ir.builder` (which imports this module);
    import them from there. They stay readable here for ``ir/composites.py`` (part of the semantics hash) and
    ``backends/nki/synthesis_space.py``, which still do."""
    if name in _BUILDER_NAMES:
        return getattr(_builder, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_BUILDER_NAMES = ("Builder", "Value", "as_shape")
# -- input names ---------------------------------------------------------------------------------
CANONICAL_INPUT = "in{}"
"""The names ``canonical_inputs`` gives a program's inputs, in order."""


def canonical_inputs(program: Program) -> tuple[Program, dict[str, str]]:
    """``program`` with its inputs named by position (``in0``, ``in1``, ...; roles renamed with them) and the
    map from those names back to the program's. Two regions of two identical blocks (a transformer's layers)
    differ only in their inputs' names (the blocks' parameter paths): their canonical programs are equal, so
    phase 1 of one serves the other (``extract.candidates.renamed``), and the dynamo backend keys a region's bundle
by it. Everything phase 1 computes is independent of the names."""
    names: dict[str, str] = {}
    nodes = []
    for n in program.nodes:
        if n.op == "input":
            new = CANONICAL_INPUT.format(len(names))
            names[n.attrs["name"]] = new
            n = replace(n, attrs=named_input(n.attrs, new))
        nodes.append(n)
    roles = tuple(sorted((names.get(k, k), v) for k, v in program.roles))
    return replace(program, nodes=tuple(nodes), roles=roles), {new: old for old, new in names.items()}


def named_input(attrs: O.Attrs, name: str) -> O.Attrs:
    return O.Attrs(tuple((k, name if k == "name" else v) for k, v in attrs.items()))


def with_names(program: Program, names: dict[str, str], title: str) -> Program:
    """``program`` with its inputs renamed by ``names`` (those it does not name keep theirs), called ``title``."""
    nodes = tuple(replace(n, attrs=named_input(n.attrs, names.get(n.attrs["name"], n.attrs["name"]))) if n.op == "input"
                  else n for n in program.nodes)
    roles = tuple((names.get(k, k), v) for k, v in program.roles)
    return replace(program, nodes=nodes, roles=roles, name=title)


__all__ = ["CANONICAL_INPUT", "AxonError", "Builder", "Dim", "InputSpec", "Node", "Program", "Value", "as_shape",
           "canonical_inputs", "named_input", "with_names"]

# The Builder makes Programs and imports Node and Program from here: this module binds it last, once both exist
# (whichever of the two is imported first).
from axon_eg.ir import builder as _builder  # noqa: E402
