"""Block pointers (``tl.make_block_ptr``, ``tl.advance``, ``tl.load``/``tl.store`` with ``boundary_check``) written
as the pointer arithmetic they stand for, with masks.

Intel's Triton kernels, and Xe-Forge's inputs after them, address 2-d tiles through block pointers. Triton 3.7
removed them in favor of tensor descriptors (Triton 3.9's ``tl.make_block_ptr`` raises, ``tl.advance`` is gone),
and a tensor descriptor is no drop-in replacement: it asks a 16-byte aligned base and pitches and a contiguous
last dimension, where a block pointer takes any strides (``order`` is only a hint). So a block pointer becomes
what it means, on every Triton:

- ``p = tl.make_block_ptr(base, shape, strides, offsets, block_shape, order)`` binds ``p`` to ``base`` and one
  scalar per dimension for its extent, its stride (int64, as Triton's block pointers hold them) and its offset;
- ``p = tl.advance(p, deltas)`` adds to the offsets (``q = tl.advance(p, ...)`` copies ``p``'s fields first);
- ``tl.load(p, boundary_check=dims, padding_option=...)`` loads ``p + sum((off_d + tl.arange(0, B_d)) * stride_d)``
  (each dimension broadcast along its own axis) under the mask ``0 <= off_d + i < shape_d`` of each checked
  dimension, ``other`` zero (or NaN for ``padding_option="nan"``); ``tl.store`` alike, out-of-bounds elements
  dropped. Cache and eviction keywords stay.

The offsets are scalars, so a loop that advances a block pointer carries integers (Triton's own lowering of
block pointers does the same). A use this cannot follow (a block pointer passed to a function, stored in a
tuple, advanced inside an expression, a ``boundary_check`` that is not a literal) is refused in one line
naming the kernel, the line and the pointer; every other byte of the file is kept (libcst).

Used two ways: by retargeting when the running Triton has no block pointers (the input could not run
otherwise), and as the stage ``block_pointers`` where it has them (Triton 3.6 on the GPU boxes), a candidate
like any other, and the form the tensor-descriptor stage reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from .source import TritonInputError, _dotted

MAKE = ("tl.make_block_ptr", "triton.language.make_block_ptr")
ADVANCE = ("tl.advance", "triton.language.advance")
LOAD = ("tl.load", "triton.language.load")
STORE = ("tl.store", "triton.language.store")
_MAKE_PARAMS = ("base", "shape", "strides", "offsets", "block_shape", "order")
_KEPT = ("cache_modifier", "eviction_policy", "volatile")
"""``tl.load`` / ``tl.store`` keywords that mean the same on a pointer tensor."""


def supported() -> bool:
    """Whether the Triton installed here still has block pointers (3.6 does; 3.9 has no ``tl.advance``)."""
    import triton.language as tl  # lazy: Triton loads only where a file is rewritten

    return hasattr(tl, "advance")


def uses_block_pointers(text: str) -> bool:
    return "make_block_ptr" in text


@dataclass
class _Pointer:
    rank: int
    blocks: tuple[str, ...]  # each dimension's block size, as written (constexpr expressions)
    prefix: str  # the scalars' names: f"{prefix}_shape{d}", ..._stride{d}, ..._off{d}


def rewrite(text: str, kernels: set[str] | None = None, path: str = "<input>") -> tuple[str, list[str]]:
    """``text`` with every block pointer of the kernels named (default every function using one) written as
    pointer arithmetic, and the changes made (``"line 12: block pointer a_ptr as pointer arithmetic"``).
    Raises :class:`TritonInputError` naming the file, kernel, line and pointer of a use it cannot follow."""
    if not uses_block_pointers(text):
        return text, []
    module = cst.parse_module(text)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    change = _Rewrite(module, kernels, path)
    new = wrapper.visit(change)
    return new.code, change.changes


def _call_name(node: cst.BaseExpression) -> str:
    return _dotted(node.func) if isinstance(node, cst.Call) else ""


def _args(call: cst.Call, params: tuple[str, ...]) -> dict[str, cst.BaseExpression]:
    got: dict[str, cst.BaseExpression] = {}
    for i, a in enumerate(call.args):
        if a.star:
            raise ValueError("star arguments")
        key = a.keyword.value if a.keyword is not None else (params[i] if i < len(params) else f"#{i}")
        got[key] = a.value
    return got


def _elements(node: cst.BaseExpression) -> list[cst.BaseExpression] | None:
    if isinstance(node, (cst.Tuple, cst.List)):
        return [e.value for e in node.elements if isinstance(e, cst.Element)]
    return None


class _Rewrite(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, module: cst.Module, kernels: set[str] | None, path: str) -> None:
        super().__init__()
        self.module, self.kernels, self.path = module, kernels, path
        self.changes: list[str] = []
        self.kernel: str | None = None
        self.pointers: dict[str, _Pointer] = {}
        self.names: set[str] = set()

    # -- helpers
    def _code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def _line(self, node: cst.CSTNode) -> int:
        return self.get_metadata(PositionProvider, node).start.line

    def _refuse(self, node: cst.CSTNode, what: str) -> TritonInputError:
        return TritonInputError(f"{self.path}:{self._line(node)}: kernel {self.kernel}: {what}")

    def _prefix(self, name: str) -> str:
        prefix = name
        while any(f"{prefix}_{f}{d}" in self.names for f in ("shape", "stride", "off") for d in range(8)):
            prefix += "_bp"
        return prefix

    # -- the kernels
    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        if self.kernel is not None:
            return True
        uses = "make_block_ptr" in self._code(node)
        if not uses or (self.kernels is not None and node.name.value not in self.kernels):
            return False  # nothing to rewrite in it
        self.kernel, self.pointers = node.name.value, {}
        self.names = {n.value for n in _names(node)}
        self._scan(node)
        return True

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        if original.name.value == self.kernel:
            self.kernel = None
        return updated

    def _scan(self, fn: cst.FunctionDef) -> None:
        """The block pointers of ``fn`` (names assigned ``tl.make_block_ptr`` / ``tl.advance``), each use checked."""
        assigns: list[tuple[cst.Assign, str]] = []
        for node in _walk(fn.body):
            if isinstance(node, cst.Call) and _call_name(node) in MAKE + ADVANCE:
                parent_ok = any(node is a.value for a, _ in assigns)
                if not parent_ok:
                    owner = _assign_of(fn.body, node)
                    if owner is None:
                        what = "tl.make_block_ptr" if _call_name(node) in MAKE else "tl.advance"
                        raise self._refuse(node, f"{what} outside a plain assignment `name = {what}(...)` "
                                                 "(a block pointer this rewrite cannot follow)")
                    assigns.append((owner, owner.targets[0].target.value))
        order: list[tuple[cst.Assign, str]] = sorted(assigns, key=lambda a: self._line(a[0]))
        for assign, name in order:
            call = assign.value
            if _call_name(call) in MAKE:
                try:
                    got = _args(call, _MAKE_PARAMS)
                except ValueError:
                    raise self._refuse(call, f"block pointer {name}: star arguments to tl.make_block_ptr") from None
                blocks = _elements(got.get("block_shape", cst.Name("None")))
                if blocks is None or not blocks:
                    raise self._refuse(call, f"block pointer {name}: block_shape is not a literal tuple")
                pointer = _Pointer(len(blocks), tuple(self._code(b) for b in blocks), self._prefix(name))
            else:
                src = call.args[0].value if call.args else None
                if not isinstance(src, cst.Name) or src.value not in self.pointers:
                    raise self._refuse(call, f"block pointer {name}: tl.advance of something not a block pointer "
                                             "made in this kernel")
                pointer = self.pointers[src.value]
                if name != src.value:
                    pointer = _Pointer(pointer.rank, pointer.blocks, self._prefix(name))
            known = self.pointers.get(name)
            if known is not None and (known.rank, known.blocks) != (pointer.rank, pointer.blocks):
                raise self._refuse(call, f"block pointer {name} is made twice with other block shapes "
                                         f"({', '.join(known.blocks)} and {', '.join(pointer.blocks)})")
            self.pointers.setdefault(name, pointer)
        # every other use of a block pointer: the first argument of tl.load / tl.store / tl.advance only
        allowed = {id(c.args[0].value) for c in _walk(fn.body) if isinstance(c, cst.Call) and c.args
                   and _call_name(c) in LOAD + STORE + ADVANCE}
        targets = {id(a.targets[0].target) for a, _ in assigns}
        for node in _walk(fn.body):
            if isinstance(node, cst.Name) and node.value in self.pointers and id(node) not in allowed | targets:
                raise self._refuse(node, f"block pointer {node.value} used other than by tl.load, tl.store or "
                                         "tl.advance (passed on or combined: this rewrite cannot follow it)")

    # -- statements: the block pointer's scalars
    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
                                  ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if self.kernel is None or len(original.body) != 1 or not isinstance(original.body[0], cst.Assign):
            return updated
        assign = original.body[0]
        call = assign.value
        if _call_name(call) not in MAKE + ADVANCE:
            return updated
        name = assign.targets[0].target.value
        p = self.pointers[name]
        lines: list[str] = []
        if _call_name(call) in MAKE:
            got = _args(call, _MAKE_PARAMS)
            lines.append(f"{name} = {self._code(got['base'])}")
            for field, key in (("shape", "shape"), ("stride", "strides"), ("off", "offsets")):
                if key not in got:
                    raise self._refuse(call, f"block pointer {name}: tl.make_block_ptr without {key}")
                for d, e in enumerate(self._per_dim(got[key], p.rank, call, name, key)):
                    value = f"tl.cast({e}, tl.int64)" if field == "stride" else e
                    lines.append(f"{p.prefix}_{field}{d} = {value}")
            self.changes.append(f"line {self._line(original)}: block pointer {name} as pointer arithmetic")
        else:
            src = call.args[0].value.value
            s = self.pointers[src]
            if len(call.args) < 2:
                raise self._refuse(call, f"block pointer {name}: tl.advance without offsets")
            deltas = self._per_dim(call.args[1].value, p.rank, call, name, "offsets")
            if name != src:
                lines.append(f"{name} = {src}")
                for d in range(p.rank):
                    lines += [f"{p.prefix}_shape{d} = {s.prefix}_shape{d}", f"{p.prefix}_stride{d} = {s.prefix}_stride{d}"]
            for d, e in enumerate(deltas):
                if name != src or e.strip() != "0":
                    lines.append(f"{p.prefix}_off{d} = {s.prefix}_off{d} + ({e})")
        statements = [cst.parse_statement(line + "\n") for line in lines]
        if not statements:
            return cst.RemovalSentinel.REMOVE  # type: ignore[return-value]
        statements[0] = statements[0].with_changes(leading_lines=updated.leading_lines)
        return cst.FlattenSentinel(statements)

    def _per_dim(self, node: cst.BaseExpression, rank: int, call: cst.Call, name: str, key: str) -> list[str]:
        items = _elements(node)
        if items is None:
            return [f"({self._code(node)})[{d}]" for d in range(rank)]
        if len(items) != rank:
            raise self._refuse(call, f"block pointer {name}: {key} has {len(items)} entries for a block of rank {rank}")
        return [self._code(e) for e in items]

    # -- loads and stores
    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if self.kernel is None or _call_name(original) not in LOAD + STORE or not original.args:
            return updated
        first = original.args[0].value
        if not isinstance(first, cst.Name) or first.value not in self.pointers:
            return updated
        name = first.value
        p = self.pointers[name]
        store = _call_name(original) in STORE
        params = ("pointer", "value", "mask", "boundary_check") if store else \
            ("pointer", "mask", "other", "boundary_check", "padding_option")
        got = _args(updated, params)
        if "mask" in got or "other" in got:
            raise self._refuse(original, f"block pointer {name}: a mask or other on a block pointer access")
        checked = self._dims(got.get("boundary_check"), p.rank, original, name)
        idx = [f"({p.prefix}_off{d} + tl.arange(0, {p.blocks[d]}))" + _axis(d, p.rank) for d in range(p.rank)]
        pointer = " + ".join([name, *(f"{i} * {p.prefix}_stride{d}" for d, i in enumerate(idx))])
        mask = " & ".join(f"({i} >= 0) & ({i} < {p.prefix}_shape{d})" for d, i in enumerate(idx) if d in checked)
        args = [pointer]
        if store:
            args.append(self._code(got["value"]))
        if mask:
            args.append(f"mask={mask}")
            if not store:
                padding = got.get("padding_option")
                nan = isinstance(padding, cst.SimpleString) and padding.evaluated_value == "nan"
                args.append("other=float('nan')" if nan else "other=0")
        args += [f"{k}={self._code(v)}" for k, v in got.items() if k in _KEPT]
        unknown = set(got) - {"pointer", "value", "boundary_check", "padding_option", *_KEPT}
        if unknown:
            raise self._refuse(original, f"block pointer {name}: tl.{'store' if store else 'load'} argument "
                                         f"{sorted(unknown)[0]} on a block pointer")
        return cst.parse_expression(f"{self._code(updated.func)}({', '.join(args)})")

    def _dims(self, node: cst.BaseExpression | None, rank: int, call: cst.Call, name: str) -> set[int]:
        if node is None:
            return set()
        items = _elements(node)
        items = [node] if items is None else items
        dims: set[int] = set()
        for e in items:
            if not isinstance(e, cst.Integer) or int(e.value) >= rank:
                raise self._refuse(call, f"block pointer {name}: boundary_check={self._code(node)} is not a literal "
                                         f"tuple of dimensions below {rank}")
            dims.add(int(e.value))
        return dims


def _axis(d: int, rank: int) -> str:
    """The subscript that puts a 1-d index along axis ``d`` of a rank-``rank`` block: ``[:, None]`` for 0 of 2."""
    if rank == 1:
        return ""
    return "[" + ", ".join(":" if a == d else "None" for a in range(rank)) + "]"


def _walk(node: cst.CSTNode):
    """Every node under ``node`` (itself included), depth first."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def _names(node: cst.CSTNode) -> list[cst.Name]:
    return [n for n in _walk(node) if isinstance(n, cst.Name)]


def _assign_of(body: cst.CSTNode, call: cst.Call) -> cst.Assign | None:
    """The statement ``name = call`` (one plain name target) whose value is ``call``, if there is one."""
    for n in _walk(body):
        if isinstance(n, cst.Assign) and n.value is call and len(n.targets) == 1 \
                and isinstance(n.targets[0].target, cst.Name):
            return n
    return None


__all__ = ["rewrite", "supported", "uses_block_pointers"]
