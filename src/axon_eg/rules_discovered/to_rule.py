"""A proven candidate (two Programs over symbolic inputs) as νGraph rule data (pattern language).

The rule must say exactly what was proved, since the νGraph applies the rule, not the candidate
(``instantiate`` rebuilds the proof obligation from the rule text alone, and that is what is proved):

- inputs become pattern variables; for a rule that is not *pointwise*, their ranks, constant sizes
  and equal dims become conditions (``(= (rank ?x) 2)``, ``(= (dim ?x 1) 1)``,
  ``(= (dim ?w 0) (dim ?x 1))``);
- attributes become literals, except symbolic-dim attributes (a reshape target, a slice bound),
  which become attribute variables bound on the left *and pinned by a condition* to the input dims
  they were proved with (``(= ?shape0 [(dim ?x 0) (* (dim ?x 1) (dim ?x 2))])``), so that a
  reshape to ``[N]`` never matches a reshape to ``[N, 1]``;
- an attribute the semantics take symbolically (``op_semantics.SYMBOLIC_ATTRIBUTES``: a convolution's
  stride, padding, dilation, groups) whose value is symbolic in the candidate becomes an attribute
  variable no condition pins (``:stride ?stride``): the rule matches every value, and its obligation is
  symbolic in it (``instantiate``); an input dim that mentions it becomes a size condition over it
  (``(= (dim ?x 1) (* (dim ?w 1) ?groups))``);
- rank-0 inputs that are symbolic scalars (``RuleCandidate.symbols``) become ``(constant :value ?c
  :dtype ?dt_c)`` with their sign as a condition;
- when the two sides' dtypes are not the same function of the leaves' dtypes (a constant is
  dropped or introduced), the condition that they agree: ``(= (promote (dtype ?x) ?dt) (dtype ?x))``
  (``x + 0.0`` is ``x`` only when adding the constant does not widen ``x``).

A *pointwise* rule (only element-wise ops, the same inputs on both sides) carries no shape
condition: an element-wise expression's value at an output index is a scalar function of its
leaves' elements at the broadcast indices, the same on both sides, so the scalar identity (proved
on equal rank-1 shapes) holds for any shapes and broadcasting.
"""

from __future__ import annotations

from typing import Any

from axon_eg.egraph.patterns import App, Pattern, Rule, Var, _Str, check_rule, walk
from axon_eg.errors import AxonError
from axon_eg.ir import dims as D
from axon_eg.ir import ops as O
from axon_eg.ir.program import Program
from axon_eg.semantics.op_semantics import SYMBOLIC_ATTRIBUTES

from .enumerate import RuleCandidate


class Unexpressible(AxonError):
    """A proven identity the pattern language cannot state (e.g. a new symbolic dim on the right)."""


def is_pointwise(c: RuleCandidate) -> bool:
    for p in (c.lhs, c.rhs):
        for n in p.nodes:
            op = O.get(n.op)
            if op.kind not in (O.OpKind.SOURCE, O.OpKind.ELEMENTWISE) or op.meta.get("index_dependent"):
                return False
    return {s.name for s in c.lhs.inputs} == {s.name for s in c.rhs.inputs}


class _Converter:
    def __init__(self, c: RuleCandidate):
        self.symbols = {s.name: s for s in c.symbols}
        self.attr_vars: dict[tuple[str, str], str] = {}  # (attr kind, value text) -> variable
        self.attr_values: dict[str, Any] = {}  # variable -> the symbolic value it was proved with
        self.symbolic: dict[tuple[str, str], str] = {}  # (attribute, value text) -> free attribute variable
        self.symbol_vars: dict[str, str] = {}  # a symbolic int attribute's dim name -> its variable (?groups)
        self.dtype_var = "dt"
        self.side = "lhs"

    def pattern(self, program: Program) -> Pattern:
        memo: dict[int, Pattern] = {}
        for i in range(len(program.nodes)):
            memo[i] = self._node(program, i, memo)
        out = program.outputs
        if len(out) != 1:
            raise Unexpressible("rules have one output")
        return memo[out[0]]

    def _node(self, program: Program, i: int, memo: dict[int, Pattern]) -> Pattern:
        n = program.nodes[i]
        if n.is_input and n.attrs["name"] in self.symbols:
            name = n.attrs["name"]
            if n.shape:
                raise Unexpressible(f"symbolic scalar {name} must have rank 0")
            return App("constant", (), (("value", Var(name)), ("dtype", Var(f"{self.dtype_var}_{name}"))))
        if n.is_input:
            return Var(n.attrs["name"])
        op = O.get(n.op)
        attrs: list[tuple[str, Any]] = []
        for a in op.attrs:
            value = n.attrs[a.name]
            if n.is_constant and a.name == "dtype":
                attrs.append(("dtype", Var(self.dtype_var)))  # any dtype; the same for every constant
            elif a.name in SYMBOLIC_ATTRIBUTES.get(n.op, {}) and _symbolic(value):
                attrs.append((a.name, Var(self._symbolic_var(n.op, a.name, value))))
            elif a.kind.removeprefix("optional_") in ("dim", "dims") and _symbolic(value):
                key = (a.kind, repr(value))
                if key not in self.attr_vars:
                    if self.side == "rhs":
                        raise Unexpressible(f"{n.op}.{a.name} = {value} appears only on the right")
                    self.attr_vars[key] = f"{a.name}{len(self.attr_vars)}"
                    self.attr_values[self.attr_vars[key]] = value
                attrs.append((a.name, Var(self.attr_vars[key])))
            else:
                attrs.append((a.name, value))
        return App(n.op, tuple(memo[j] for j in n.inputs), tuple(attrs))


    def _symbolic_var(self, op: str, attr: str, value: Any) -> str:
        key = (attr, repr(value))
        if key not in self.symbolic:
            if self.side == "rhs":
                raise Unexpressible(f"{op}.{attr} = {value} appears only on the right")
            taken = set(self.symbolic.values())
            name = attr if attr not in taken else f"{attr}{len(self.symbolic)}"
            self.symbolic[key] = name
            if isinstance(value, D.Sym) and str(value).isidentifier():
                self.symbol_vars[str(value)] = f"?{name}"
        return self.symbolic[key]


def _symbolic(value: Any) -> bool:
    if isinstance(value, D.Sym):
        return True
    return isinstance(value, tuple) and any(isinstance(v, D.Sym) for v in value)


def shape_conditions(program: Program, skip: frozenset[str] = frozenset(),
                     symbols: dict[str, str] | None = None) -> tuple[list[list], dict[str, list]]:
    """Ranks, constant sizes and equal dims of the inputs (but ``skip``), as condition s-expressions,
    and where each dim name was first seen, as ``(dim ?x axis)``. A compound dim is a condition over the
    dims seen and ``symbols`` (a symbolic attribute's dim name -> its variable), e.g. a grouped conv's
    input channels ``(* (dim ?w 1) ?groups)``."""
    conds: list[list] = []
    first: dict[str, list] = {}
    compound: list[tuple[str, int, D.Dim]] = []
    for spec in program.inputs:
        if spec.name in skip:
            continue
        var = f"?{spec.name}"
        conds.append(["=", ["rank", var], len(spec.shape)])
        for axis, d in enumerate(spec.shape):
            if isinstance(d, int):
                conds.append(["=", ["dim", var, axis], d])
            elif len(D.names(d)) == 1 and str(d).isidentifier() and str(d) not in (symbols or {}):
                name = str(d)
                if name in first:
                    conds.append(["=", ["dim", var, axis], first[name]])
                else:
                    first[name] = ["dim", var, axis]
            else:
                compound.append((var, axis, d))
    for var, axis, d in compound:
        if not symbols:
            raise Unexpressible(f"input {var[1:]} has a compound dim {d}")
        conds.append(["=", ["dim", var, axis], dim_condition(d, {**first, **symbols}, f"input {var[1:]}'s dim {d}")])
    return conds, first


def dim_condition(d: D.Dim, where: dict[str, Any], what: str) -> Any:
    """A symbolic dim as a condition expression over the inputs' dims (ints, + * /)."""
    if isinstance(d, int):
        return d
    total: Any = None
    for mono, coeff in d.terms:
        term: Any = coeff if coeff != 1 or not mono else None
        for atom in mono:
            if isinstance(atom, str):
                if atom not in where:
                    raise Unexpressible(f"{what} uses dim {atom}, which no input has and no attribute gives whole")
                factor: Any = where[atom]
            else:
                factor = ["/", dim_condition(atom.num, where, what), dim_condition(atom.den, where, what)]
            term = factor if term is None else ["*", term, factor]
        total = term if total is None else ["+", total, term]
    return total


def attribute_conditions(conv: _Converter, where: dict[str, list]) -> list[list]:
    """Each symbolic-dim attribute variable pinned to the dims it was proved with. A dim no input
    has (the new rows of a broadcast) is a *size variable* ``?size_M``, free like the proof's ``M``;
    it must appear as a whole entry somewhere, where the νGraph reads its value."""
    known = dict(where)
    for value in conv.attr_values.values():
        for x in value if isinstance(value, tuple) else (value,):
            if isinstance(x, D.Sym) and str(x).isidentifier() and str(x) not in known:
                known[str(x)] = f"?size_{x}"
    conds: list[list] = []
    for var, value in conv.attr_values.items():
        what = f"attribute ?{var} = {value}"
        pinned = (tuple(dim_condition(x, known, what) for x in value) if isinstance(value, tuple)
                  else dim_condition(value, known, what))
        conds.append(["=", f"?{var}", pinned])
    return conds


def dtype_of(p: Pattern) -> frozenset:
    """A pattern's dtype as the set of leaf dtypes it promotes over (promotion is a join), or a
    fixed dtype where an op sets it (``cast``, ``constant``)."""
    if isinstance(p, Var):
        return frozenset({("dtype", f"?{p.name}")})
    fixed = p.attr("dtype")
    if fixed is not None and any(a.name == "dtype" for a in O.get(p.op).attrs):
        return frozenset({f"?{fixed.name}" if isinstance(fixed, Var) else ("literal", str(fixed))})
    out: frozenset = frozenset()
    for a in p.args:
        out |= dtype_of(a)
    return out


def _promote_sexp(leaves: frozenset) -> Any:
    items = sorted(leaves, key=repr)
    terms = [["dtype", x[1]] if isinstance(x, tuple) and x[0] == "dtype" else
             (_literal_dtype(x[1]) if isinstance(x, tuple) else x) for x in items]
    out = terms[0]
    for t in terms[1:]:
        out = ["promote", out, t]
    return out


def _literal_dtype(name: str) -> Any:
    return _Str(name)


def dtype_conditions(lhs: Pattern, rhs: Pattern) -> list[list]:
    left, right = dtype_of(lhs), dtype_of(rhs)
    if left == right:
        return []
    return [["=", _promote_sexp(left), _promote_sexp(right)]]


def to_rule(c: RuleCandidate) -> Rule:
    conv = _Converter(c)
    lhs = conv.pattern(c.lhs)
    context = tuple(conv.pattern(p) for p in c.context)
    if not all(isinstance(p, App) for p in context):
        raise Unexpressible("a context must be an op application")
    conv.side = "rhs"
    rhs = conv.pattern(c.rhs)
    if not isinstance(lhs, App):
        raise Unexpressible("the left-hand side must be an op application")
    if any(isinstance(n, App) and n.op == "constant" for n in walk(rhs)) and not any(
            isinstance(n, App) and n.op == "constant" for n in walk(lhs)):
        raise Unexpressible("a constant appears only on the right (its dtype is unknown)")
    conds: list = []
    if not is_pointwise(c):
        shapes, where = shape_conditions(c.lhs, frozenset(conv.symbols), conv.symbol_vars)
        conds += shapes + attribute_conditions(conv, where)
    elif conv.attr_values:
        raise Unexpressible("a pointwise rule with symbolic-dim attributes")
    conds += dtype_conditions(lhs, rhs)
    for s in c.symbols:
        if s.constraint:
            op = {">0": ">", "<0": "<", ">=0": ">="}[s.constraint]
            conds.append([op, f"?{s.name}", 0.0])
    rule = Rule(c.name, lhs, rhs, tuple(conds), {"family": c.family}, context)
    check_rule(rule)
    return rule


def reverse(rule: Rule) -> Rule | None:
    """The rule read right to left, when the right side binds everything the left side uses (never for a
    rule with a context: its right side is what it merged, read back it would only undo the merge)."""
    if not isinstance(rule.rhs, App) or rule.context:
        return None
    back = Rule(rule.name + "~rev", rule.rhs, rule.lhs, rule.conditions, dict(rule.meta))
    try:
        check_rule(back)
    except AxonError:
        return None
    return back
