"""A rule's proof obligation, rebuilt from the rule text alone: what the νGraph applies is what is proved.

``instantiate(rule)`` turns ``lhs => rhs if conditions`` into two Programs over the most general
inputs the conditions allow, so that proving them equal proves every application of the rule:

- each tensor variable becomes an input of the rank its ``(= (rank ?x) r)`` condition gives, with a
  fresh symbolic dim per axis, except where conditions fix a size (``(= (dim ?x 1) 1)``), equate two
  dims, or define one from others (``(= (dim ?y 0) (* (dim ?x 0) (dim ?x 1)))``);
- a ``dims``/``dim`` attribute variable takes the value its condition pins it to
  (``(= ?shape0 [(dim ?x 0) 1])``); an attribute variable no condition pins cannot be proved for
  every value and the rule is refused;
- an attribute variable no condition pins, at an attribute the semantics take symbolically
  (``op_semantics.SYMBOLIC_ATTRIBUTES``: a convolution's stride, padding, dilation and groups), becomes
  symbolic dims, one per spatial axis (``attr_stride0``, ``attr_padding0 - 1``: any value >= the least
  one), which may also appear in size conditions (``(= (dim ?x 1) (* (dim ?w 1) ?groups))``): the proof
  is symbolic in them and covers every value the νGraph can bind;
- a constant whose value is a variable (``(constant :value ?c)``) becomes a rank-0 input, a
  :class:`ScalarSymbol` carrying its sign condition;
- dtype conditions do not enter the proof (the prover works over the reals); they restrict where the
  νGraph applies the rule, which the e-graph's dtype analysis then checks.

A *pointwise* rule without shape conditions (only element-wise ops, the same tensor variables on
both sides) is instantiated with every variable of shape ``[N]``: the scalar identity on independent
elements, which implies the rule for every shape and broadcasting (see ``to_rule``).

``holds(rule, binding)`` evaluates the conditions on a concrete match (sizes, attribute values,
dtypes), as the νGraph does; the instance property tests (``axon_eg.testing.rules``) draw random
concrete matches with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from axon_eg.egraph.patterns import App, Pattern, Rule, Var, _Str, attribute_kinds, format_sexp, walk
from axon_eg.errors import AxonError
from axon_eg.ir import dims as D
from axon_eg.ir import ops as O
from axon_eg.ir.builder import Builder, Value
from axon_eg.ir.dtypes import as_dtype, promote
from axon_eg.ir.program import Program
from axon_eg.semantics.op_semantics import ATTRIBUTE_DIM_PREFIX, SYMBOLIC_ATTRIBUTES
from axon_eg.semantics.prover import ScalarSymbol

DTYPE = "fp32"
_SIGNS = {">": ">0", "<": "<0", ">=": ">=0"}
_DIM_NAMES = "MNKLPQRSTUVW"


class InstantiationError(AxonError):
    """A rule whose conditions do not determine a proof obligation (names the rule and the piece)."""


@dataclass(frozen=True)
class Obligation:
    """The two sides of a rule over its most general inputs, and its symbolic scalars."""

    rule: Rule
    lhs: Program
    rhs: Program
    symbols: tuple[ScalarSymbol, ...] = ()


def flat_conditions(rule: Rule) -> list[Any]:
    out: list[Any] = []
    stack = list(rule.conditions)
    while stack:
        c = stack.pop(0)
        if isinstance(c, list) and c and c[0] == "and":
            stack[:0] = c[1:]
        else:
            out.append(c)
    return out


def rank_of(c: Any) -> tuple[str, int] | None:
    """(variable, rank) when ``c`` is a rank condition ``(= (rank ?x) r)``."""
    if (isinstance(c, list) and len(c) == 3 and c[0] == "=" and isinstance(c[1], list) and c[1][:1] == ["rank"]
            and isinstance(c[2], int)):
        return c[1][1][1:], c[2]
    return None


def ranks(rule: Rule) -> dict[str, int]:
    """The ranks the rule's conditions fix, by tensor variable."""
    return dict(r for c in flat_conditions(rule) if (r := rank_of(c)) is not None)


def tensor_variables(rule: Rule) -> list[str]:
    """Tensor variables in order of first appearance (left-hand side first)."""
    seen: dict[str, None] = {}
    for side in (rule.lhs, *rule.context, rule.rhs):
        for node in walk(side):
            if isinstance(node, Var):
                seen.setdefault(node.name, None)
    return list(seen)


def scalar_variables(rule: Rule) -> list[str]:
    """Attribute variables that are a constant's value (symbolic scalars)."""
    out: dict[str, None] = {}
    for node in walk(rule.lhs):
        if isinstance(node, App) and node.op == "constant" and isinstance(node.attr("value"), Var):
            out.setdefault(node.attr("value").name, None)
    return list(out)


def symbolic_attributes(rule: Rule) -> dict[str, tuple[str, str]]:
    """Attribute variables bound on the left-hand side at an attribute the semantics take symbolically
    (``op_semantics.SYMBOLIC_ATTRIBUTES``), each with the op and attribute it is bound at. A variable no
    condition pins there matches any value, and its obligation is symbolic in it."""
    pinned = {c[1][1:] for c in flat_conditions(rule)
              if isinstance(c, list) and len(c) == 3 and c[0] == "=" and isinstance(c[1], str)}
    out: dict[str, tuple[str, str]] = {}
    for node in walk(rule.lhs):
        if isinstance(node, App):
            for name, v in node.attrs:
                if isinstance(v, Var) and name in SYMBOLIC_ATTRIBUTES.get(node.op, {}) and v.name not in pinned:
                    out.setdefault(v.name, (node.op, name))
    return out


def is_pointwise(rule: Rule) -> bool:
    for side in (rule.lhs, rule.rhs):
        for node in walk(side):
            if isinstance(node, App):
                op = O.get(node.op)
                if op.kind not in (O.OpKind.SOURCE, O.OpKind.ELEMENTWISE) or op.meta.get("index_dependent"):
                    return False
    left = {n.name for n in walk(rule.lhs) if isinstance(n, Var)}
    right = {n.name for n in walk(rule.rhs) if isinstance(n, Var)}
    return left == right


# ------------------------------------------------------------------------------------------------
# Symbolic instantiation
# ------------------------------------------------------------------------------------------------
@dataclass
class _Dims:
    """Dim slots ``(var, axis)`` in union-find classes, each class a constant, a definition or fresh."""

    parent: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)
    const: dict[tuple[str, int], int] = field(default_factory=dict)
    defined: dict[tuple[str, int], Any] = field(default_factory=dict)

    def find(self, s: tuple[str, int]) -> tuple[str, int]:
        self.parent.setdefault(s, s)
        while self.parent[s] != s:
            self.parent[s] = self.parent[self.parent[s]]
            s = self.parent[s]
        return s

    def union(self, a: tuple[str, int], b: tuple[str, int]) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra
            for table in (self.const, self.defined):
                if rb in table:
                    table.setdefault(ra, table.pop(rb))


def _slot(term: Any, ranks: Mapping[str, int], rule: Rule) -> tuple[str, int] | None:
    if isinstance(term, list) and len(term) == 3 and term[0] == "dim" and isinstance(term[1], str):
        var, axis = term[1][1:], term[2]
        if var not in ranks:
            raise InstantiationError(f"rule {rule.name}: {format_sexp(term)} needs a rank condition on ?{var}")
        axis = axis + ranks[var] if axis < 0 else axis
        if not 0 <= axis < ranks[var]:
            raise InstantiationError(f"rule {rule.name}: {format_sexp(term)} is out of range for rank {ranks[var]}")
        return var, axis
    return None


class _Instantiator:
    def __init__(self, rule: Rule):
        self.rule = rule
        self.kinds = attribute_kinds(rule)
        self.scalars = scalar_variables(rule)
        self.tensors = tensor_variables(rule)
        self.ranks: dict[str, int] = {}
        self.dims = _Dims()
        self.attrs: dict[str, Any] = {}  # attribute variable -> its condition expression (not yet a Dim)
        self.signs: dict[str, str] = {}
        self.names: dict[tuple[str, int], D.Dim] = {}
        self.fresh = 0
        self.sizes: dict[str, D.Dim] = {}
        self.symbolic = {v: _symbolic_value(v, op, name) for v, (op, name) in symbolic_attributes(rule).items()}

    def fail(self, what: str) -> InstantiationError:
        return InstantiationError(f"rule {self.rule.name}: {what}")

    def read_conditions(self) -> None:
        self.ranks = ranks(self.rule)  # first: dim conditions need them
        for c in flat_conditions(self.rule):
            if rank_of(c) is None:
                self.read(c)

    def read(self, c: Any) -> None:
        if not (isinstance(c, list) and len(c) == 3):
            raise self.fail(f"condition {format_sexp(c)} is not a comparison")
        op, a, b = c
        if op in _SIGNS and isinstance(a, str) and a[1:] in self.scalars and b == 0:
            self.signs[a[1:]] = _SIGNS[op]
            return
        if op != "=":
            raise self.fail(f"condition {format_sexp(c)} cannot be instantiated (only = and scalar signs can)")
        if _mentions_dtype(a) or _mentions_dtype(b):
            return  # over the reals, dtypes do not matter; the νGraph checks them
        if isinstance(a, list) and a[:1] == ["shape"] and isinstance(b, list) and b[:1] == ["shape"]:
            x, y = a[1][1:], b[1][1:]
            if x not in self.ranks and y not in self.ranks:
                raise self.fail(f"{format_sexp(c)} needs a rank condition")
            r = self.ranks.setdefault(x, self.ranks.get(y, 0))
            self.ranks.setdefault(y, r)
            if self.ranks[y] != r:
                raise self.fail(f"{format_sexp(c)} contradicts the rank conditions")
            for i in range(r):
                self.dims.union((x, i), (y, i))
            return
        for left, right in ((a, b), (b, a)):
            if isinstance(left, str) and left.startswith("?") and self.kinds.get(left[1:]) in ("dim", "dims"):
                self.attrs[left[1:]] = right
                return
        sa, sb = _slot(a, self.ranks, self.rule), _slot(b, self.ranks, self.rule)
        if sa and sb:
            self.dims.union(sa, sb)
        elif sa or sb:
            slot, other = (sa, b) if sa else (sb, a)
            if isinstance(other, int):
                root = self.dims.find(slot)
                if self.dims.const.get(root, other) != other:
                    raise self.fail(f"{format_sexp(c)} contradicts another size condition")
                self.dims.const[root] = other
            else:
                self.dims.defined.setdefault(self.dims.find(slot), other)
        else:
            raise self.fail(f"condition {format_sexp(c)} cannot be instantiated")

    def dim(self, slot: tuple[str, int], busy: frozenset = frozenset()) -> D.Dim:
        root = self.dims.find(slot)
        if root in self.names:
            return self.names[root]
        if root in self.dims.const:
            value: D.Dim = self.dims.const[root]
        elif root in self.dims.defined:
            if root in busy:
                raise self.fail(f"the size conditions on ?{root[0]} axis {root[1]} are circular")
            value = self.expr(self.dims.defined[root], busy | {root})
        else:
            k = self.fresh
            self.fresh += 1
            value = D.sym(_DIM_NAMES[k] if k < len(_DIM_NAMES) else f"D{k}")
        self.names[root] = value
        return value

    def expr(self, e: Any, busy: frozenset = frozenset()) -> D.Dim:
        if isinstance(e, bool) or isinstance(e, float):
            raise self.fail(f"size expression {format_sexp(e)} is not an integer")
        if isinstance(e, int):
            return e
        if isinstance(e, str) and e.startswith("?") and isinstance(self.symbolic.get(e[1:]), D.Sym):
            return self.symbolic[e[1:]]  # a symbolic int attribute (a conv's groups)
        if isinstance(e, str) and e.startswith("?") and e[1:] not in self.kinds:  # a size variable: any size
            if e not in self.sizes:
                k = self.fresh
                self.fresh += 1
                self.sizes[e] = D.sym(_DIM_NAMES[k] if k < len(_DIM_NAMES) else f"D{k}")
            return self.sizes[e]
        slot = _slot(e, self.ranks, self.rule)
        if slot is not None:
            return self.dim(slot, busy)
        if isinstance(e, list) and len(e) == 3 and e[0] in ("+", "-", "*", "/"):
            x, y = self.expr(e[1], busy), self.expr(e[2], busy)
            return {"+": D.add, "-": lambda p, q: D.add(p, D.mul(q, -1)), "*": D.mul, "/": D.floordiv}[e[0]](x, y)
        raise self.fail(f"size expression {format_sexp(e)} cannot be instantiated")

    def shapes(self) -> dict[str, tuple[D.Dim, ...]]:
        missing = [t for t in self.tensors if t not in self.ranks]
        if missing and not self.ranks and not self.dims.parent and is_pointwise(self.rule):
            return {t: (D.sym("N"),) for t in self.tensors}
        if missing:
            raise self.fail(f"?{missing[0]} has no rank condition: the rule is not pointwise, so it cannot be "
                            "proved for every rank")
        return {t: tuple(self.dim((t, i)) for i in range(self.ranks[t])) for t in self.tensors}

    def attribute(self, name: str) -> Any:
        if name not in self.attrs:
            raise self.fail(f"attribute ?{name} is bound by no condition: the rule would match any value of it")
        e = self.attrs[name]
        if self.kinds[name] == "dims":
            if not isinstance(e, tuple):
                raise self.fail(f"attribute ?{name} must be pinned to a list [..]")
            return tuple(self.expr(x) for x in e)
        return self.expr(e)

    def build(self) -> Obligation:
        self.read_conditions()
        shapes = self.shapes()
        values = {v: self.attribute(v) for v in self.kinds if self.kinds[v] in ("dim", "dims")}
        values.update(self.symbolic)
        free = [v for v, k in self.kinds.items()
                if k not in ("dim", "dims", "dtype") and v not in self.scalars and v not in self.symbolic]
        if free:
            raise self.fail(f"attribute ?{free[0]} ({self.kinds[free[0]]}) is a variable: only sizes, dtypes and "
                            "constant values may be")
        sides = []
        for pattern in (self.rule.lhs, self.rule.rhs):
            b = Builder(self.rule.name)
            env: dict[str, Value] = {t: b.input(t, shapes[t], DTYPE) for t in self.tensors}
            env.update({s: b.input(s, (), DTYPE) for s in self.scalars})
            try:
                sides.append(b.build(_emit(b, pattern, env, values)))
            except AxonError as e:
                raise self.fail(f"its {'left' if pattern is self.rule.lhs else 'right'}-hand side does not build on "
                                f"the instance ({e})") from None
        symbols = tuple(ScalarSymbol(s, self.signs.get(s)) for s in self.scalars)
        return Obligation(self.rule, sides[0], sides[1], symbols)


def _symbolic_value(var: str, op: str, attr: str) -> Any:
    """The symbolic value of attribute variable ``?var`` bound at ``op``'s ``attr``: a dim per spatial axis for
    a per-axis attribute (one for an int one), offset so that its least value is the attribute's least."""
    least = SYMBOLIC_ATTRIBUTES[op][attr] - 1

    def one(name: str) -> D.Dim:
        return D.add(D.sym(f"{ATTRIBUTE_DIM_PREFIX}{name}"), least)

    kind = next(a.kind for a in O.get(op).attrs if a.name == attr).removeprefix("optional_")
    if kind == "ints":
        return tuple(one(f"{var}{axis}") for axis in range(int(O.get(op).meta["spatial"])))
    return one(var)


def _mentions_dtype(e: Any) -> bool:
    if isinstance(e, list):
        return bool(e) and e[0] in ("dtype", "promote") or any(_mentions_dtype(x) for x in e)
    return isinstance(e, _Str)


def _emit(b: Builder, p: Pattern, env: Mapping[str, Value], values: Mapping[str, Any]) -> Value:
    if isinstance(p, Var):
        return env[p.name]
    if p.op == "constant":
        value = p.attr("value")
        if isinstance(value, Var):
            return env[value.name]
        dtype = p.attr("dtype")
        return b.constant(value, DTYPE if dtype is None or isinstance(dtype, Var) else dtype)
    attrs = {}
    for name, v in p.attrs:
        if isinstance(v, Var):
            if v.name not in values:
                raise InstantiationError(f"attribute ?{v.name} of {p.op} has no value")
            attrs[name] = values[v.name]
        else:
            attrs[name] = v
    return b.emit(p.op, *[_emit(b, a, env, values) for a in p.args], **attrs)


def instantiate(rule: Rule) -> Obligation:
    """The rule's proof obligation (see the module docstring); raises InstantiationError naming the
    condition or variable that leaves it open."""
    return _Instantiator(rule).build()


# ------------------------------------------------------------------------------------------------
# Concrete matches
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Binding:
    """A concrete match: shapes and dtypes of tensor variables, values of attribute variables."""

    shapes: Mapping[str, tuple[int, ...]]
    dtypes: Mapping[str, str]
    attrs: Mapping[str, Any]


def holds(rule: Rule, binding: Binding) -> bool:
    """Whether the rule's conditions hold for a concrete match (what the νGraph checks); size
    variables take their value from the list entry that names them."""
    kinds = attribute_kinds(rule)
    conds = flat_conditions(rule)
    env = Binding(binding.shapes, binding.dtypes, dict(binding.attrs))
    for c in conds:
        if c[0] == "=" and isinstance(c[2], tuple):
            value = env.attrs[c[1][1:]]
            if len(value) != len(c[2]):
                return False
            for x, v in zip(c[2], value):
                if isinstance(x, str) and x.startswith("?") and x[1:] not in kinds:
                    if env.attrs.setdefault(x[1:], v) != v:  # type: ignore[attr-defined]
                        return False
    return all(_holds(c, env, kinds) for c in conds)


def _holds(c: Any, env: Binding, kinds: Mapping[str, str]) -> bool:
    op, a, b = c
    if op == "=" and isinstance(b, tuple):
        value = env.attrs[a[1:]]
        return len(value) == len(b) and all(_value(x, env, kinds) == y for x, y in zip(b, value))
    x, y = _value(a, env, kinds), _value(b, env, kinds)
    return {"=": x == y, "!=": x != y, "<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[op]


def _value(e: Any, env: Binding, kinds: Mapping[str, str]) -> Any:
    if isinstance(e, _Str):
        return str(e)
    if isinstance(e, (bool, int, float)):
        return e
    if isinstance(e, str) and e.startswith("?"):
        return env.attrs[e[1:]]
    head, *args = e
    if head == "dim":
        shape = env.shapes[args[0][1:]]
        return shape[args[1]]
    if head == "rank":
        return len(env.shapes[args[0][1:]])
    if head == "shape":
        return tuple(env.shapes[args[0][1:]])
    if head == "dtype":
        return env.dtypes[args[0][1:]]
    if head == "promote":
        return promote(as_dtype(_value(args[0], env, kinds)), as_dtype(_value(args[1], env, kinds))).name
    x, y = (_value(v, env, kinds) for v in args)
    return {"+": lambda: x + y, "-": lambda: x - y, "*": lambda: x * y, "/": lambda: x // y,
            "min": lambda: min(x, y), "max": lambda: max(x, y)}[head]()


__all__ = ["Binding", "InstantiationError", "Obligation", "holds", "instantiate"]
