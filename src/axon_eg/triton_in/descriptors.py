"""Stage ``tensor_descriptors``: loads and stores of a 1-D or 2-D affine tile through tensor descriptors.

Inside ``@triton.jit`` kernels, an access written with manual pointer arithmetic and a bounds mask::

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rk = k0 + tl.arange(0, BLOCK_K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)

becomes the same tile through a tensor descriptor (``tl.make_tensor_descriptor``; on Hopper and later a TMA
bulk copy), built inline at the access so it is right in loops too::

    a = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1],
                                  block_shape=[BLOCK_M, BLOCK_K]).load([pid_m * BLOCK_M, k0])

``tt.make_tensor_descriptor`` is a pure op, so the compiler's loop-invariant code motion and CSE hoist and
share a descriptor whose base, shape and strides do not change in the loop; only the offsets are per access.

What is recognized (libcst, on the syntax tree; every other access is left as written):

- the pointer: a sum (``+``, ``-``) of scalar terms (the base: kernel parameters, ``tl.program_id``, loop
  variables over ``range``, names assigned such expressions, integer arithmetic of these) and one index term
  per dimension: ``R`` (1-D) or ``R[:, None]`` / ``R[None, :]`` (2-D), alone (stride 1) or times a scalar
  stride on either side, in any order. The scalar terms stay together as the descriptor's base.
- strides: a descriptor's last stride must be 1. A 1-D tile needs stride 1 (``x_ptr + rows * n_cols + col``,
  a column walk, stays as written). A 2-D tile needs exactly one stride-1 dimension: when it is dimension 1
  the descriptor is the tile's; when it is dimension 0 (``w_ptr + rn[None, :] * K + rk[:, None]``: dimension
  0 is ``rk``, stride 1, dimension 1 ``rn``, stride K) the descriptor is over the transposed view (shape
  ``[D1, D0]``, strides ``[S1, 1]``, block ``[B1, B0]``, offsets ``[X1, X0]``) and the loaded tile goes
  through ``tl.trans`` back to the tile's orientation (a stored value through ``tl.trans`` into the view's).
- an index name ``R``: its binding at the access (the latest assignment before it in the same or an
  enclosing block, where no loop or branch in between may have changed it) is ``X + tl.arange(0, B)``,
  ``tl.arange(0, B) + X`` or ``tl.arange(0, B)``, with ``B`` an integer literal or a ``tl.constexpr``
  parameter and ``X`` scalar; ``X`` and ``B`` are copied to the access, so every name in them must still
  mean there what it meant at the assignment. ``tl.arange`` already makes ``B`` a power of two, which is
  what a descriptor's block shape must be.
- the mask: absent, or a conjunction (``&``, either order, through names assigned masks) of ``R < D`` /
  ``D > R`` comparisons written with the same broadcast as the pointer's term, at most one per dimension.
  The descriptor's shape is ``D`` on a dimension the mask bounds, elsewhere ``X + B`` (the tile's own
  extent, so nothing there is out of bounds). A descriptor's bounds are ``0 <= X + i < shape`` on every
  dimension, so every offset ``X`` must be provably non-negative (program ids, constexpr block sizes used by
  ``tl.arange``, literals, loop variables of a ``range`` from a non-negative start by a positive step, and
  their sums, products, ``//`` and ``%``).
- ``other``: out-of-bounds elements of a descriptor load read as zero, so a load is rewritten when its
  masked-off lanes are zero (``other=0`` / ``0.0``) or undefined (a mask without ``other``), or it has no
  mask. Any other ``other`` (``-float("inf")``, say) leaves the load as written. ``cache_modifier``,
  ``eviction_policy`` and ``volatile`` have no descriptor counterpart: such an access stays as written.
- ``tl.store(P + ..., value, mask=...)`` likewise (out-of-bounds elements are dropped, as the mask dropped
  them); the value goes through ``tl.cast`` to the base's element type (as a pointer store converts) and
  ``tl.broadcast_to`` the block shape (a descriptor store takes exactly a block-shaped value where a pointer
  store broadcasts a scalar or a smaller tile; both are no-ops on a value that already has them).

A kernel with no recognized access is not detected. ``space``: one point per detected kernel (on GPUs) that
has a ``tl.dot`` of 16-bit operands, the kernel's every recognized access rewritten at once (see
``TensorDescriptors.space`` for the measurements that confine it there).

Run-time requirements, not refused here (a candidate that breaks one fails when it is compiled or run, and
the measurement cascade records it as a failed row):

- the last block dimension times the element size is at least 16 bytes (a compile-time ``ValueError``:
  ``BLOCK=next_power_of_2(n)`` with ``n < 4`` float32 elements fails);
- the base (including the scalar terms, ``x_ptr + row * n_cols``) is 16-byte aligned, every non-last stride
  is a multiple of 16 bytes, and the last dimension's offset is a multiple of 16 bytes (Triton's documented
  contract; Triton 3.9's interpreter asserts all three, so odd row lengths fail there too);
- shapes and offsets are 32-bit (TMA coordinates; an int64 offset is refused when the kernel is compiled);
- the element type is at least a byte wide (a descriptor over ``tl.int1``, a bool buffer, is refused when
  the kernel is compiled);
- descriptors made inside a kernel need global scratch memory on a GPU: the harness calls
  ``triton.set_allocator`` (this stage adds nothing outside kernel bodies, as ``stages.wrapper_unchanged``
  requires).

Triton versions: ``tl.make_tensor_descriptor(base, shape=, strides=, block_shape=)`` (rank 1 to 5, zero
padding by default) and ``desc.load`` / ``desc.store`` have the same form in Triton 3.6 (the GPU machines';
checked against its ``semantic.py``, not yet run on a GPU) and 3.9 (this machine's, whose interpreter runs
them: bounds-checked, zero-filled, with the alignment asserts above). Block pointers, which Triton 3.9
removed, are not used.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from axon_eg.hw import HardwareSpec

from .source import TritonFile, _dotted, _is_jit
from .tiles import kernel_facts

_LOAD_PARAMS = ("pointer", "mask", "other", "boundary_check", "padding_option", "cache_modifier", "eviction_policy",
                "volatile")
_STORE_PARAMS = ("pointer", "value", "mask", "boundary_check", "cache_modifier", "eviction_policy")
_HINTS = ("cache_modifier", "eviction_policy", "volatile")
_LANG = ("tl", "triton.language")
_SCALAR_CALLS = {f"{lang}.{f}" for lang in _LANG for f in ("program_id", "num_programs")}
_RANGES = {"range"} | {f"{lang}.{f}" for lang in _LANG for f in ("range", "static_range")}


def tensor_descriptors_supported() -> bool:
    """Whether the installed Triton has ``tl.make_tensor_descriptor`` (3.4 on; 3.6 and 3.9 do)."""
    import triton.language as tl

    return hasattr(tl, "make_tensor_descriptor")


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


# ---------------------------------------------------------------------------------------------------------
# What each name means at a point of a kernel


@dataclass(eq=False)
class _Binding:
    """One binding of a name: a parameter, a ``for`` variable, an assignment ``name = value``, or unknown (a
    value the analysis does not follow: loop-carried, assigned in a branch, augmented, unpacked). Identity
    matters: a name means the same at two points when it has the same binding object there."""

    kind: str  # "param", "constexpr", "loop", "assign", "unknown"
    value: cst.BaseExpression | None = None  # assign: the value; loop: the iterable
    env: dict[str, _Binding] = field(default_factory=dict)  # what names meant where it was bound


_Env = dict[str, _Binding]


def _unknown() -> _Binding:
    return _Binding("unknown")


class _Names(cst.CSTVisitor):
    """The names an expression reads (not attribute names, not keyword-argument names)."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False


def _names(node: cst.CSTNode) -> set[str]:
    v = _Names()
    node.visit(v)
    return v.names


class _Bound(cst.CSTVisitor):
    """The names a statement (and everything nested in it) may bind."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def target(self, node: cst.BaseExpression) -> None:
        if isinstance(node, cst.Name):
            self.names.add(node.value)
        elif isinstance(node, (cst.Tuple, cst.List)):
            for el in node.elements:
                self.target(el.value)
        elif isinstance(node, cst.StarredElement):
            self.target(node.value)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self.target(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.target(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self.target(node.target)

    def visit_For(self, node: cst.For) -> None:
        self.target(node.target)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self.target(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:
        self.target(node.name)

    def visit_Del(self, node: cst.Del) -> None:
        self.target(node.target)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.names.add(node.name.value)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.names.add(node.name.value)

    def visit_ImportAlias(self, node: cst.ImportAlias) -> None:
        self.names.add(_dotted(node.name).split(".")[0] if node.asname is None else _code(node.asname.name))


def _bound(*nodes: cst.CSTNode | None, targets: cst.BaseExpression | None = None) -> set[str]:
    """The names the statements ``nodes`` may bind, and the names of the target expression ``targets``."""
    v = _Bound()
    for node in nodes:
        if node is not None:
            node.visit(v)
    if targets is not None:
        v.target(targets)
    return v.names


def _forget(env: _Env, names: set[str]) -> _Env:
    """``env`` with each of ``names`` bound to a fresh unknown."""
    out = dict(env)
    for n in names:
        out[n] = _unknown()
    return out


# ---------------------------------------------------------------------------------------------------------
# Facts about expressions


class _Facts:
    """Scalar-ness and non-negativity of integer expressions of one kernel."""

    def __init__(self, positive: set[str]) -> None:
        self.positive = positive  # constexpr parameters that some tl.arange(0, P) proves a power of two

    def scalar(self, e: cst.BaseExpression, env: _Env) -> bool:
        if isinstance(e, cst.Integer):
            return True
        if isinstance(e, cst.Name):
            b = env.get(e.value)
            if b is None or b.kind == "unknown":
                return False
            return b.kind != "assign" or (b.value is not None and self.scalar(b.value, b.env))
        if isinstance(e, cst.Call):
            return _dotted(e.func) in _SCALAR_CALLS and all(isinstance(a.value, cst.Integer) for a in e.args)
        if isinstance(e, cst.BinaryOperation):
            return isinstance(e.operator, (cst.Add, cst.Subtract, cst.Multiply, cst.FloorDivide, cst.Modulo)) and \
                self.scalar(e.left, env) and self.scalar(e.right, env)
        if isinstance(e, cst.UnaryOperation):
            return isinstance(e.operator, cst.Minus) and self.scalar(e.expression, env)
        return False

    def nonneg(self, e: cst.BaseExpression, env: _Env) -> bool:
        if isinstance(e, cst.Integer):
            return True
        if isinstance(e, cst.Name):
            b = env.get(e.value)
            if b is None:
                return False
            if b.kind == "assign":
                return b.value is not None and self.nonneg(b.value, b.env)
            if b.kind == "loop":
                return self._loop_nonneg(b)
            return b.kind == "constexpr" and e.value in self.positive
        if isinstance(e, cst.Call):
            return _dotted(e.func) in _SCALAR_CALLS
        if isinstance(e, cst.BinaryOperation):
            return isinstance(e.operator, (cst.Add, cst.Multiply, cst.FloorDivide, cst.Modulo)) and \
                self.nonneg(e.left, env) and self.nonneg(e.right, env)
        return False

    def positive_step(self, e: cst.BaseExpression, env: _Env) -> bool:
        if isinstance(e, cst.Integer):
            return int(e.value, 0) > 0
        if isinstance(e, cst.Name):
            b = env.get(e.value)
            return b is not None and b.kind == "constexpr" and e.value in self.positive
        return False

    def _loop_nonneg(self, b: _Binding) -> bool:
        it = b.value
        if not (isinstance(it, cst.Call) and _dotted(it.func) in _RANGES):
            return False
        args = [a.value for a in it.args if a.keyword is None and not a.star]
        if len(args) == 1:
            return True
        if len(args) == 2:
            return self.nonneg(args[0], b.env)
        return len(args) == 3 and self.nonneg(args[0], b.env) and self.positive_step(args[2], b.env)


def _portable(e: cst.CSTNode, there: _Env, here: _Env) -> bool:
    """Whether every name ``e`` reads means at ``here`` what it meant at ``there``."""
    return all(there.get(n) is here.get(n) for n in _names(e))


def _is_lang_call(node: cst.BaseExpression, fn: str) -> bool:
    return isinstance(node, cst.Call) and _dotted(node.func) in {f"{lang}.{fn}" for lang in _LANG}


def _arange_block(e: cst.BaseExpression, env: _Env) -> cst.BaseExpression | None:
    """``B`` of ``tl.arange(0, B)`` (an int literal or a constexpr parameter), else None."""
    if not _is_lang_call(e, "arange"):
        return None
    assert isinstance(e, cst.Call)
    if len(e.args) != 2 or any(a.keyword is not None or a.star for a in e.args):
        return None
    start, end = e.args[0].value, e.args[1].value
    if not (isinstance(start, cst.Integer) and int(start.value, 0) == 0):
        return None
    if isinstance(end, cst.Integer):
        return end
    b = env.get(end.value) if isinstance(end, cst.Name) else None
    return end if b is not None and b.kind == "constexpr" else None


@dataclass
class _Index:
    """An index name bound to ``offset + tl.arange(0, block)``."""

    binding: _Binding
    offset: cst.BaseExpression | None
    block: cst.BaseExpression


def _index(name: str, env: _Env, facts: _Facts) -> _Index | str:
    b = env.get(name)
    if b is None or b.kind != "assign" or b.value is None:
        return f"{name} is not assigned tl.arange(0, B) (+ offset) where it is used"
    v = b.value
    block = _arange_block(v, b.env)
    if block is not None:
        return _Index(b, None, block)
    if isinstance(v, cst.BinaryOperation) and isinstance(v.operator, cst.Add):
        for ar, off in ((v.right, v.left), (v.left, v.right)):
            block = _arange_block(ar, b.env)
            if block is not None:
                if not facts.scalar(off, b.env):
                    return f"the offset of {name} is not a scalar integer expression"
                return _Index(b, off, block)
    return f"{name} is not assigned tl.arange(0, B) (+ offset) where it is used"


def _broadcast(e: cst.BaseExpression) -> tuple[str, int | None] | None:
    """``R`` -> (R, None); ``R[:, None]`` -> (R, 0); ``R[None, :]`` -> (R, 1); else None."""
    if isinstance(e, cst.Name):
        return e.value, None
    if not (isinstance(e, cst.Subscript) and isinstance(e.value, cst.Name) and len(e.slice) == 2):
        return None

    def full(el: cst.SubscriptElement) -> bool:
        s = el.slice
        return isinstance(s, cst.Slice) and s.lower is None and s.upper is None and s.step is None

    def none(el: cst.SubscriptElement) -> bool:
        return isinstance(el.slice, cst.Index) and isinstance(el.slice.value, cst.Name) and el.slice.value.value == "None"

    a, b = e.slice
    if full(a) and none(b):
        return e.value.value, 0
    if none(a) and full(b):
        return e.value.value, 1
    return None


def _terms(e: cst.BaseExpression, sign: int = 1) -> list[tuple[int, cst.BaseExpression]]:
    if isinstance(e, cst.BinaryOperation) and isinstance(e.operator, (cst.Add, cst.Subtract)):
        return _terms(e.left, sign) + _terms(e.right, sign if isinstance(e.operator, cst.Add) else -sign)
    return [(sign, e)]


@dataclass
class _Dim:
    index: _Index
    name: str
    stride: cst.BaseExpression | None  # None: 1


@dataclass
class _Tile:
    base: str
    dims: list[_Dim]  # in dimension order
    slot: list[int | None]  # per dimension: None (1-D) or the broadcast position (0 or 1)


def _tile(pointer: cst.BaseExpression, env: _Env, facts: _Facts) -> _Tile | str:
    base: list[tuple[int, cst.BaseExpression]] = []
    found: dict[int | None, _Dim] = {}
    for sign, term in _terms(pointer):
        if facts.scalar(term, env):
            base.append((sign, term))
            continue
        idx = _broadcast(term)
        stride: cst.BaseExpression | None = None
        if idx is None and isinstance(term, cst.BinaryOperation) and isinstance(term.operator, cst.Multiply):
            for i, s in ((term.left, term.right), (term.right, term.left)):
                if _broadcast(i) is not None and facts.scalar(s, env):
                    idx, stride = _broadcast(i), s
                    break
        if idx is None:
            return f"pointer term {_code(term)!r} is neither a scalar nor an index (times a scalar stride)"
        name, slot = idx
        if sign < 0:
            return f"index term {_code(term)!r} is subtracted"
        if slot in found:
            return "two index terms for one dimension"
        ix = _index(name, env, facts)
        if isinstance(ix, str):
            return ix
        found[slot] = _Dim(ix, name, stride)
    if not found:
        return "no index term"
    if set(found) not in ({None}, {0, 1}):
        return "the index terms are neither one 1-D index nor a [:, None] and a [None, :] index"
    pos = [t for s, t in base if s > 0]
    neg = [t for s, t in base if s < 0]
    if not pos:
        return "no base pointer term"
    text = " + ".join(_code(t) for t in pos) + "".join(f" - {_code(t)}" for t in neg)
    slots: list[int | None] = [None] if None in found else [0, 1]
    return _Tile(text, [found[s] for s in slots], slots)


def _mask(e: cst.BaseExpression, env: _Env, here: _Env,
          facts: _Facts) -> list[tuple[int | None, _Binding, cst.BaseExpression]] | str:
    """The mask's bounds: (broadcast slot, index binding, bound D) per conjunct; D is portable to ``here``."""
    if isinstance(e, cst.Name):
        b = env.get(e.value)
        if b is None or b.kind != "assign" or b.value is None:
            return f"mask {e.value} is not assigned a comparison where it is used"
        return _mask(b.value, b.env, here, facts)
    if isinstance(e, cst.BinaryOperation) and isinstance(e.operator, cst.BitAnd):
        left = _mask(e.left, env, here, facts)
        if isinstance(left, str):
            return left
        right = _mask(e.right, env, here, facts)
        return right if isinstance(right, str) else left + right
    if isinstance(e, cst.Comparison) and len(e.comparisons) == 1:
        op, rhs = e.comparisons[0].operator, e.comparisons[0].comparator
        if isinstance(op, cst.LessThan):
            idx, bound = e.left, rhs
        elif isinstance(op, cst.GreaterThan):
            idx, bound = rhs, e.left
        else:
            return f"mask comparison {_code(e)!r} is not R < D"
        bc = _broadcast(idx)
        if bc is None:
            return f"mask comparison {_code(e)!r} does not compare an index name"
        b = env.get(bc[0])
        if b is None:
            return f"mask comparison {_code(e)!r}: {bc[0]} is unbound"
        if not facts.scalar(bound, env) or not _portable(bound, env, here):
            return f"the bound of {_code(e)!r} is not a scalar that means the same at the access"
        return [(bc[1], b, bound)]
    return f"mask {_code(e)!r} is not a conjunction of R < D bounds"


def _zero(e: cst.BaseExpression) -> bool:
    if isinstance(e, cst.Integer):
        return int(e.value, 0) == 0
    if isinstance(e, cst.Float):
        return float(e.value) == 0.0
    return False


# ---------------------------------------------------------------------------------------------------------
# One access


@dataclass(frozen=True)
class Access:
    """A ``tl.load`` / ``tl.store`` of a kernel: what it becomes, or why it stays as written."""

    kernel: str
    line: int
    op: str  # "load" or "store"
    code: str  # the call as written
    descriptor: str | None  # the tl.make_tensor_descriptor(...) it goes through; None: left as written
    offsets: tuple[str, ...] = ()  # the descriptor's offsets, in the descriptor's dimension order
    transposed: bool = False  # the descriptor is over the tile's transposed view (tl.trans at the access)
    bounded: tuple[int, ...] = ()  # the tile's dimensions the mask bounds (shape D there, X + B elsewhere)
    why: str = ""  # why it is left as written ("" when rewritten)

    @property
    def rewritten(self) -> str | None:
        """The expression the call becomes (a store's value written ``VALUE``); None: left as written."""
        return None if self.descriptor is None else _written(self, "VALUE")


def _written(a: Access, value: str) -> str:
    """What access ``a`` (rewritten) becomes; ``value``: a store's value, cast and broadcast to the tile."""
    assert a.descriptor is not None
    lang = _lang(a.descriptor)
    offs = f"[{', '.join(a.offsets)}]"
    if a.op == "load":
        load = f"{a.descriptor}.load({offs})"
        return f"{lang}.trans({load})" if a.transposed else load
    return f"{a.descriptor}.store({offs}, {f'{lang}.trans({value})' if a.transposed else value})"


def _lang(descriptor: str) -> str:
    return descriptor.split(".make_tensor_descriptor(", 1)[0]


@dataclass
class _Plan:
    call: cst.Call
    access: Access
    lang: str  # "tl" or "triton.language", as the call spells it
    base: str = ""
    blocks: tuple[str, ...] = ()  # the tile's block shape (tile order)


def _bind(call: cst.Call, params: tuple[str, ...]) -> dict[str, cst.Arg] | None:
    out: dict[str, cst.Arg] = {}
    for i, a in enumerate(call.args):
        if a.star:
            return None
        name = a.keyword.value if a.keyword is not None else (params[i] if i < len(params) else None)
        if name is None or name in out:
            return None
        out[name] = a
    return out


def _none(arg: cst.Arg | None) -> bool:
    return arg is None or (isinstance(arg.value, cst.Name) and arg.value.value == "None")


def _unit(stride: cst.BaseExpression | None) -> bool:
    return stride is None or (isinstance(stride, cst.Integer) and int(stride.value, 0) == 1)


def _plan(call: cst.Call, op: str, env: _Env, facts: _Facts, kernel: str, line: int) -> _Plan:
    lang = _dotted(call.func).rsplit(".", 1)[0]
    plan = _Plan(call, Access(kernel, line, op, _code(call), None), lang)

    def no(why: str) -> _Plan:
        plan.access = Access(kernel, line, op, plan.access.code, None, why=why)
        return plan

    params = _LOAD_PARAMS if op == "load" else _STORE_PARAMS
    args = _bind(call, params)
    if args is None or "pointer" not in args:
        return no("arguments not understood")
    if any(a.keyword is None and params.index(n) > 2 for n, a in args.items()):
        return no("positional arguments past the mask")
    if "boundary_check" in args or "padding_option" in args:
        return no("already a block-pointer access")
    hints = [n for n in _HINTS if n in args]
    if hints:
        return no(f"{hints[0]} has no tensor-descriptor counterpart")
    tile = _tile(args["pointer"].value, env, facts)
    if isinstance(tile, str):
        return no(tile)
    other = None if _none(args.get("other")) else args["other"].value
    if other is not None and not _zero(other):
        return no(f"other={_code(other)} is not zero (a descriptor load reads zeros out of bounds)")
    bounds: dict[int, cst.BaseExpression] = {}
    if not _none(args.get("mask")):
        conj = _mask(args["mask"].value, env, env, facts)
        if isinstance(conj, str):
            return no(conj)
        for slot, binding, bound in conj:
            dims = [i for i, s in enumerate(tile.slot) if s == slot]
            if not dims or tile.dims[dims[0]].index.binding is not binding:
                return no("the mask bounds an index the pointer does not use that way")
            if dims[0] in bounds:
                return no("the mask bounds one dimension twice")
            bounds[dims[0]] = bound
    unit = [i for i, d in enumerate(tile.dims) if _unit(d.stride)]
    if len(tile.dims) == 1 and not unit:
        return no(f"the index {tile.dims[0].name} has stride {_code(tile.dims[0].stride)} (a tensor descriptor's "
                  "last stride must be 1)")
    if len(tile.dims) == 2 and len(unit) != 1:
        return no("no dimension has stride 1" if not unit else "both dimensions have stride 1")
    shape, strides, offsets, blocks = [], [], [], []
    for i, d in enumerate(tile.dims):
        ix = d.index
        there = ix.binding.env
        for part in (ix.offset, ix.block):
            if part is not None and not _portable(part, there, env):
                return no(f"the offset or block of {d.name} means something else at the access")
        off = "0" if ix.offset is None else _code(ix.offset)
        if ix.offset is not None and not facts.nonneg(ix.offset, there):
            return no(f"the offset of {d.name} is not provably non-negative (a descriptor also checks >= 0)")
        block = _code(ix.block)
        shape.append(_code(bounds[i]) if i in bounds else (block if ix.offset is None else f"{off} + {block}"))
        strides.append("1" if _unit(d.stride) else _code(d.stride))
        offsets.append(off)
        blocks.append(block)
    transposed = unit == [0] and len(tile.dims) == 2
    order = [1, 0] if transposed else list(range(len(tile.dims)))

    def lst(xs: list[str]) -> str:
        return f"[{', '.join(xs[i] for i in order)}]"

    text = (f"{lang}.make_tensor_descriptor({tile.base}, shape={lst(shape)}, strides={lst(strides)}, "
            f"block_shape={lst(blocks)})")
    plan.base, plan.blocks = tile.base, tuple(blocks)
    plan.access = Access(kernel, line, op, plan.access.code, text, tuple(offsets[i] for i in order), transposed,
                         tuple(sorted(bounds)))
    return plan


# ---------------------------------------------------------------------------------------------------------
# Walking a kernel


class _Calls(cst.CSTVisitor):
    """The tl.load / tl.store calls in an expression or simple statement, outermost first."""

    def __init__(self) -> None:
        self.calls: list[tuple[cst.Call, str]] = []

    def visit_Call(self, node: cst.Call) -> None:
        for op in ("load", "store"):
            if _is_lang_call(node, op):
                self.calls.append((node, op))

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


class _Walk:
    """The kernel's statements in order, each access planned with what its names mean there."""

    def __init__(self, kernel: str, facts: _Facts, lines: Any) -> None:
        self.kernel, self.facts, self.lines = kernel, facts, lines
        self.plans: list[_Plan] = []

    def scan(self, node: cst.CSTNode | None, env: _Env) -> None:
        if node is None:
            return
        v = _Calls()
        node.visit(v)
        if v.calls and _walrus(node):
            env = _forget(env, _bound(node))
        for call, op in v.calls:
            self.plans.append(_plan(call, op, env, self.facts, self.kernel, self.lines[call].start.line))

    def suite(self, suite: cst.BaseSuite, env: _Env) -> None:
        for stmt in suite.body:
            if isinstance(stmt, cst.BaseSmallStatement):
                self.small(stmt, env)
            else:
                self.stmt(stmt, env)

    def stmt(self, s: cst.BaseStatement, env: _Env) -> None:
        if isinstance(s, cst.SimpleStatementLine):
            for small in s.body:
                self.small(small, env)
        elif isinstance(s, cst.For):
            self.scan(s.iter, env)
            changed = _bound(s.body, s.orelse, targets=s.target)
            inner = _forget(env, changed)
            if isinstance(s.target, cst.Name) and isinstance(s.iter, cst.Call) and _dotted(s.iter.func) in _RANGES:
                inner[s.target.value] = _Binding("loop", s.iter, dict(env))
            self.suite(s.body, inner)
            if s.orelse is not None:
                self.suite(s.orelse.body, _forget(env, changed))
            env.update(_forget(env, changed))
        elif isinstance(s, cst.While):
            changed = _bound(s.body, s.orelse, s.test)
            inner = _forget(env, changed)
            self.scan(s.test, inner)
            self.suite(s.body, inner)
            if s.orelse is not None:
                self.suite(s.orelse.body, _forget(env, changed))
            env.update(_forget(env, changed))
        elif isinstance(s, cst.If):
            self.scan(s.test, env)
            self.suite(s.body, dict(env))
            if isinstance(s.orelse, cst.If):
                self.stmt(s.orelse, dict(env))
            elif isinstance(s.orelse, cst.Else):
                self.suite(s.orelse.body, dict(env))
            env.update(_forget(env, _bound(s)))
        else:  # with, try, nested definitions: not followed
            env.update(_forget(env, _bound(s)))

    def small(self, s: cst.BaseSmallStatement, env: _Env) -> None:
        self.scan(s, env)
        before = dict(env)
        targets: list[cst.BaseExpression] = []
        value: cst.BaseExpression | None = None
        if isinstance(s, cst.Assign):
            targets, value = [t.target for t in s.targets], s.value
        elif isinstance(s, cst.AnnAssign) and s.value is not None:
            targets, value = [s.target], s.value
        env.update(_forget(env, _bound(s)))
        if value is not None and all(isinstance(t, cst.Name) for t in targets) and not _walrus(value):
            for t in targets:
                assert isinstance(t, cst.Name)
                env[t.value] = _Binding("assign", value, before)


def _walrus(node: cst.CSTNode) -> list[cst.NamedExpr]:
    found: list[cst.NamedExpr] = []

    class V(cst.CSTVisitor):
        def visit_NamedExpr(self, n: cst.NamedExpr) -> None:
            found.append(n)

    node.visit(V())
    return found


def _positive(fn: cst.FunctionDef, constexprs: Sequence[str]) -> set[str]:
    """Constexpr parameters used as ``tl.arange(0, P)`` (so a power of two, >= 1) and never reassigned."""
    used: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            if _is_lang_call(node, "arange") and len(node.args) == 2 and isinstance(node.args[1].value, cst.Name):
                used.add(node.args[1].value.value)

    fn.body.visit(V())
    return {p for p in constexprs if p in used} - _bound(fn.body)


def _plans(tf: TritonFile) -> list[_Plan]:
    wrapper = MetadataWrapper(tf.module, unsafe_skip_copy=True)
    lines = wrapper.resolve(PositionProvider)
    fns: list[cst.FunctionDef] = []

    class V(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            if node.name.value in tf.kernels and any(_is_jit(d)[0] for d in node.decorators):
                fns.append(node)

    tf.module.visit(V())
    out: list[_Plan] = []
    for fn in fns:
        k = tf.kernels[fn.name.value]
        env: _Env = {p: _Binding("constexpr" if p in k.constexprs else "param") for p in k.params}
        walk = _Walk(k.name, _Facts(_positive(fn, k.constexprs)), lines)
        walk.suite(fn.body, env)
        out += walk.plans
    return out


def accesses(tf: TritonFile) -> list[Access]:
    """Every ``tl.load`` / ``tl.store`` in the file's kernels: the tensor descriptor it goes through, or why
    it stays as written."""
    return [p.access for p in _plans(tf)]


# ---------------------------------------------------------------------------------------------------------
# Writing


class _Rewrite(cst.CSTTransformer):
    def __init__(self, plans: list[_Plan]) -> None:
        self.plans = {id(p.call): p for p in plans}

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        plan = self.plans.get(id(original))
        if plan is None or plan.access.descriptor is None:
            return updated
        if plan.access.op == "load":
            return cst.parse_expression(_written(plan.access, ""))
        # the value as updated (loads inside it already rewritten), cast and broadcast to the tile
        names = list(_bind(original, _STORE_PARAMS) or {})
        value = _code(updated.args[names.index("value")].value)
        simple = isinstance(cst.parse_expression(plan.base), (cst.Name, cst.Attribute))
        base = plan.base if simple else f"({plan.base})"
        shape = f"({plan.blocks[0]},)" if len(plan.blocks) == 1 else f"({', '.join(plan.blocks)})"
        tile = f"{plan.lang}.broadcast_to({plan.lang}.cast({value}, {base}.dtype.element_ty), {shape})"
        return cst.parse_expression(_written(plan.access, tile))


class TensorDescriptors:
    """Loads and stores of affine tiles through ``tl.make_tensor_descriptor`` (see the module docstring)."""

    name = "tensor_descriptors"
    after: tuple[str, ...] = ("dtype_correction",)

    def detect(self, tf: TritonFile) -> list[str]:
        found: list[str] = []
        for a in accesses(tf):
            if a.descriptor is not None and a.kernel not in found:
                found.append(a.kernel)
        return found

    def space(self, tf: TritonFile, hw: HardwareSpec) -> list[dict[str, Any]]:
        """One point per kernel whose descriptors would feed a tensor-core product of 16-bit operands: a kernel
        with ``tl.dot`` whose traced tensors are at most 2 bytes an element (any, without a trace). Measured
        elsewhere, descriptors lose: made once per program, they cost a global write and a fence each, so
        streaming kernels of many small programs ran 1.5-4.7x slower on the H100 (bias + GELU 1524.6 us
        against 321.1, layer norm 412.5 against 191.5, row sum 249.1 against 171.0), and fp32 products through
        TMA ran at 0.52 TFLOP/s against 9.35 on the H200 (``compute.measured_peak.fp32_dot_tma``)."""
        if hw.kind != "gpu":
            return []
        points = []
        for k in self.detect(tf):
            traced = next((t for t in (tf.trace or []) if t.kernel == k), None)
            narrow = traced is None or max(traced.tensor_items.values(), default=2) <= 2
            if kernel_facts(tf, k).dot and narrow:
                points.append({"kernel": k})
        return points

    def apply(self, tf: TritonFile, params: dict[str, Any]) -> str:
        plans = [p for p in _plans(tf) if p.access.kernel == params["kernel"] and p.access.descriptor is not None]
        return tf.module.visit(_Rewrite(plans)).code


__all__ = ["Access", "TensorDescriptors", "accesses", "tensor_descriptors_supported"]
