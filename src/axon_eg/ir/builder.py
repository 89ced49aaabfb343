"""Building programs: :class:`Builder` adds registry ops one by one, validating each against the registry
(arity, attributes, shape and dtype rules), naming the user's source line in errors, and sharing identical
nodes (hash-consing); :class:`Value` is its handle to one node (front ends subclass it to add operators).
``Builder.build`` freezes the nodes reachable from the outputs into a :class:`~axon_eg.ir.program.Program`.

Import these from ``axon_eg.ir.program`` or here: the Program's own rebuilds (``bind``, ``expand``,
``canonical``, ``from_json``) go through a Builder, and ``program`` re-exports these names.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from axon_eg.errors import InvalidAttribute, ProgramError, ShapeError
from axon_eg.ir import dims as D
from axon_eg.ir import ops as O
from axon_eg.ir.dims import Shape
from axon_eg.ir.dtypes import DType, as_dtype
from axon_eg.ir.library_ops import BIAS_AFTER
from axon_eg.ir.program import Node, Program


class Value:
    """A handle to one node of a Builder; front ends subclass it to add operators."""

    __slots__ = ("builder", "id")

    def __init__(self, builder: Builder, id: int):
        self.builder = builder
        self.id = id

    @property
    def shape(self) -> Shape:
        return self.builder.nodes[self.id].shape

    @property
    def dtype(self) -> DType:
        return self.builder.nodes[self.id].dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} %{self.id}: {self.dtype}{D.format_shape(self.shape)}>"


class Builder:
    """Builds a Program node by node, validating each op and sharing identical nodes."""

    def __init__(self, name: str = "program", value_type: type[Value] = Value, *, expand_composites: bool = False):
        self.name = name
        self.expand_composites = expand_composites  # emit composites as their primitives
        self.nodes: list[Node] = []
        self.locations: list[str | None] = []
        self.value_type = value_type
        self._memo: dict[tuple, int] = {}
        self._input_names: set[str] = set()
        self._location: str | None = None

    # The user's source line, attached to nodes and named in errors.
    def at(self, location: str | None) -> _Location:
        return _Location(self, location)

    def _value(self, id: int) -> Value:
        return self.value_type(self, id)

    def _add(self, node: Node) -> Value:
        key = (node.op, node.inputs, node.attrs)
        if node.op != "input" and key in self._memo:
            return self._value(self._memo[key])
        self.nodes.append(node)
        self.locations.append(self._location)
        self._memo[key] = len(self.nodes) - 1
        return self._value(len(self.nodes) - 1)

    def input(self, name: str, shape: Iterable[Any], dtype: Any) -> Value:
        if name in self._input_names:
            raise ProgramError(f"{self.name}: two inputs named {name!r}")
        shape = tuple(shape)
        for axis, d in enumerate(shape):
            if isinstance(d, int) and not isinstance(d, bool) and d < 1:
                raise ShapeError(f"{self.name}: input {name} has size {d} on axis {axis}; tensors with an empty "
                                 "axis are not supported (every size must be >= 1)")
        self._input_names.add(name)
        return self.emit("input", name=name, shape=tuple(shape), dtype=dtype)

    def constant(self, value: float, dtype: Any) -> Value:
        return self.emit("constant", value=float(value), dtype=as_dtype(dtype))

    def emit(self, op_name: str, *inputs: Value, **attrs: Any) -> Value:
        """Add one registry op; composite ops are kept as one node unless ``expand_composites``."""
        op = O.get(op_name)
        if op.kind is O.OpKind.COMPOSITE and self.expand_composites:
            return self.expand(op, inputs, attrs)
        if self.expand_composites and op_name in BIAS_AFTER and len(inputs) == 3:
            return self._bias_after(op, inputs, attrs)
        for x in inputs:
            if not isinstance(x, Value) or x.builder is not self:
                raise ProgramError(f"{op_name}: input {x!r} does not belong to this program")
        with self._checking(op_name, inputs):
            a = self._attrs(op, inputs, attrs)
            shape = tuple(D.as_dim(d) for d in op.shape(tuple(x.shape for x in inputs), a))
            empty = [axis for axis, d in enumerate(shape) if isinstance(d, int) and d < 1]
            if empty and op_name != "input":
                raise ShapeError(f"its result would have size {shape[empty[0]]} on axis {empty[0]}; tensors with an "
                                 "empty axis are not supported (every size must be >= 1)")
            dtype = op.dtype(tuple(x.dtype for x in inputs), a)
        return self._add(Node(op_name, tuple(x.id for x in inputs), a, shape, dtype))

    def _bias_after(self, op: O.OpDef, inputs: Sequence[Value], attrs: Mapping[str, Any]) -> Value:
        """``op(x, w, bias)`` of an op whose bias is a per-channel add after it (a convolution,
        ``library_ops.BIAS_AFTER``) as ``op(x, w) + bias`` viewed along the channel axis (checked first as
        ``op`` itself, so a bad bias is named as its)."""
        with self._checking(op.name, inputs):
            a = self._attrs(op, inputs, attrs)
            op.shape(tuple(x.shape for x in inputs), a)
        y = self.emit(op.name, *inputs[:2], **dict(a))
        bias = inputs[2]
        view = self.emit("reshape", bias, shape=(bias.shape[0],) + (1,) * (len(y.shape) - 2))
        return self.emit("add", y, view)

    def expand(self, op: O.OpDef, inputs: Sequence[Value], attrs: Mapping[str, Any]) -> Value:
        """Emit a composite op's primitives directly (checked the same way as ``emit``)."""
        assert op.expand is not None
        with self._checking(op.name, inputs):
            a = self._attrs(op, inputs, attrs)
            op.shape(tuple(x.shape for x in inputs), a)
        return op.expand(self, *inputs, **dict(a))

    @staticmethod
    def _attrs(op: O.OpDef, inputs: Sequence[Value], attrs: Mapping[str, Any]) -> Any:
        """The op's validated, canonical attributes for these inputs (arity checked first).

        An ``int`` or ``ints`` attribute may be a symbolic dim (a ``dims.Sym``, or a list with some): a
        proof obligation over every value of it (``rules_discovered.instantiate``: a convolution's stride,
        padding, dilation and groups). The registry checks the others; the op's canon and shape rules see the
        symbols, and an op whose rules cannot take them refuses them here."""
        op.check_arity(len(inputs))
        symbolic = _symbolic_attrs(op, attrs)
        if not symbolic:
            a = op.make_attrs(attrs)
            return op.canon(tuple(x.shape for x in inputs), a) if op.canon is not None else a
        placeholders = {k: 1 if isinstance(v, D.Sym) else (1,) * len(v) for k, v in symbolic.items()}
        a = op.make_attrs({**attrs, **placeholders}).replace(**symbolic)
        try:
            a = op.canon(tuple(x.shape for x in inputs), a) if op.canon is not None else a
            op.shape(tuple(x.shape for x in inputs), a)
        except TypeError:
            raise InvalidAttribute(f"{op.name}: attributes {sorted(symbolic)} cannot be symbolic") from None
        return a

    @contextmanager
    def _checking(self, op_name: str, inputs: Sequence[Value]) -> Iterator[None]:
        """Re-raise a shape or attribute error with the op, its input shapes and the user's source line."""
        try:
            yield
        except (ShapeError, InvalidAttribute) as e:
            where = f" at {self._location}" if self._location else ""
            shapes = ", ".join(D.format_shape(x.shape) for x in inputs)
            raise type(e)(f"{op_name}({shapes}){where}: {_strip_op(str(e), op_name)}") from None

    def build(self, outputs: Sequence[Value] | Value, *, dims: Mapping[str, int] | None = None,
              roles: Mapping[str, str] | None = None) -> Program:
        """Freeze the nodes reachable from ``outputs`` (inputs are always kept, in order)."""
        outs = [outputs] if isinstance(outputs, Value) else list(outputs)
        if not outs:
            raise ProgramError(f"{self.name}: a program needs at least one output")
        live = set()
        stack = [o.id for o in outs]
        while stack:
            i = stack.pop()
            if i not in live:
                live.add(i)
                stack.extend(self.nodes[i].inputs)
        keep = [i for i, n in enumerate(self.nodes) if i in live or n.op == "input"]
        remap = {old: new for new, old in enumerate(keep)}
        nodes = tuple(
            Node(self.nodes[i].op, tuple(remap[j] for j in self.nodes[i].inputs), self.nodes[i].attrs,
                 self.nodes[i].shape, self.nodes[i].dtype)
            for i in keep
        )
        role_items = tuple(sorted((k, v) for k, v in (roles or {}).items() if v != "input"))
        program = Program(nodes, tuple(remap[o.id] for o in outs), (), self.name, role_items,
                          tuple(self.locations[i] for i in keep))
        return program.bind(dims) if dims else program


def _strip_op(message: str, op_name: str) -> str:
    return message.removeprefix(f"{op_name}: ")


class _Location:
    def __init__(self, builder: Builder, location: str | None):
        self.builder, self.location, self.saved = builder, location, None

    def __enter__(self) -> None:
        self.saved = self.builder._location
        if self.location is not None:
            self.builder._location = self.location

    def __exit__(self, *exc: object) -> None:
        self.builder._location = self.saved


def as_shape(shape: Iterable[Any]) -> Shape:
    return tuple(D.as_dim(d) for d in shape)


__all__ = ["Builder", "Value", "as_shape"]


def _symbolic_attrs(op: O.OpDef, attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The ``int`` / ``ints`` attributes given as symbolic dims (see ``Builder._attrs``), canonical."""
    kinds = {a.name: a.kind.removeprefix("optional_") for a in op.attrs}
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        if kinds.get(k) == "int" and isinstance(v, D.Sym):
            out[k] = v
        elif kinds.get(k) == "ints" and isinstance(v, (tuple, list)) and any(isinstance(x, D.Sym) for x in v):
            out[k] = tuple(D.as_dim(x) for x in v)
    return out
