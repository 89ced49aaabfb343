"""A proven candidate (two Programs over symbolic inputs) as νGraph rule data (pattern language).

Inputs become pattern variables; attributes become literals, except symbolic-dim attributes (a
reshape target, a slice bound), which become attribute variables bound on the left; constants whose
value stands for any scalar become ``(constant :value ?c)`` with their sign as a condition. The
input shapes become conditions (ranks, size-1 axes, equal dims) unless the rule is *pointwise*: only
element-wise ops, the same inputs on both sides; then it holds for any shapes and broadcasting
(element-wise ops commute with broadcasting) and carries no shape condition.
"""

from __future__ import annotations

from typing import Any

from axon_eg.egraph.patterns import App, Pattern, Rule, Var, check_rule
from axon_eg.errors import AxonError
from axon_eg.ir import dims as D
from axon_eg.ir import ops as O
from axon_eg.ir.program import Program

from .enumerate import Candidate


class Unexpressible(AxonError):
    """A proven identity the pattern language cannot state (e.g. a new symbolic dim on the right)."""


def is_pointwise(c: Candidate) -> bool:
    for p in (c.lhs, c.rhs):
        for n in p.nodes:
            op = O.get(n.op)
            if op.kind not in (O.OpKind.SOURCE, O.OpKind.ELEMENTWISE) or op.meta.get("index_dependent"):
                return False
    return {s.name for s in c.lhs.inputs} == {s.name for s in c.rhs.inputs}


class _Converter:
    def __init__(self, c: Candidate):
        self.symbols = {s.value: s for s in c.symbols}
        self.attr_vars: dict[tuple[str, str], str] = {}  # (attr kind, value text) -> variable
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
        if n.op == "input":
            return Var(n.attrs["name"])
        op = O.get(n.op)
        attrs: list[tuple[str, Any]] = []
        for a in op.attrs:
            value = n.attrs[a.name]
            if n.op == "constant" and a.name == "value" and value in self.symbols:
                attrs.append(("value", Var(self.symbols[value].name)))
            elif n.op == "constant" and a.name == "dtype":
                attrs.append(("dtype", Var(self.dtype_var)))  # any dtype; the same on both sides
            elif a.kind.removeprefix("optional_") in ("dim", "dims") and _symbolic(value):
                key = (a.kind, repr(value))
                if key not in self.attr_vars:
                    if self.side == "rhs":
                        raise Unexpressible(f"{n.op}.{a.name} = {value} appears only on the right")
                    self.attr_vars[key] = f"{a.name}{len(self.attr_vars)}"
                attrs.append((a.name, Var(self.attr_vars[key])))
            else:
                attrs.append((a.name, value))
        return App(n.op, tuple(memo[j] for j in n.inputs), tuple(attrs))


def _symbolic(value: Any) -> bool:
    if isinstance(value, D.Sym):
        return True
    return isinstance(value, tuple) and any(isinstance(v, D.Sym) for v in value)


def shape_conditions(program: Program) -> list[list]:
    """Ranks, size-1 axes, constant sizes and equal dims of the inputs, as condition s-expressions."""
    conds: list[list] = []
    first: dict[str, tuple[str, int]] = {}
    for spec in program.inputs:
        var = f"?{spec.name}"
        conds.append(["=", ["rank", var], len(spec.shape)])
        for axis, d in enumerate(spec.shape):
            if isinstance(d, int):
                conds.append(["=", ["dim", var, axis], d])
            elif len(D.names(d)) == 1 and str(d).isidentifier():
                name = str(d)
                if name in first:
                    other, other_axis = first[name]
                    conds.append(["=", ["dim", var, axis], ["dim", other, other_axis]])
                else:
                    first[name] = (var, axis)
            else:
                raise Unexpressible(f"input {spec.name} has a compound dim {d}")
    return conds


def to_rule(c: Candidate) -> Rule:
    conv = _Converter(c)
    lhs = conv.pattern(c.lhs)
    conv.side = "rhs"
    rhs = conv.pattern(c.rhs)
    if not isinstance(lhs, App):
        raise Unexpressible("the left-hand side must be an op application")
    conds: list = [] if is_pointwise(c) else shape_conditions(c.lhs)
    if any(isinstance(n, App) and n.op == "constant" for n in _walk(rhs)) and not any(
            isinstance(n, App) and n.op == "constant" for n in _walk(lhs)):
        raise Unexpressible("a constant appears only on the right (its dtype is unknown)")
    for s in c.symbols:
        if s.constraint:
            op = {">0": ">", "<0": "<", ">=0": ">="}[s.constraint]
            conds.append([op, f"?{s.name}", 0.0])
    rule = Rule(c.name, lhs, rhs, tuple(conds), {"family": c.family})
    check_rule(rule)
    return rule


def reverse(rule: Rule) -> Rule | None:
    """The rule read right to left, when the right side binds everything the left side uses."""
    if not isinstance(rule.rhs, App):
        return None
    back = Rule(rule.name + "~rev", rule.rhs, rule.lhs, rule.conditions, dict(rule.meta))
    try:
        check_rule(back)
    except AxonError:
        return None
    return back


def _walk(p: Pattern):
    yield p
    if isinstance(p, App):
        for a in p.args:
            yield from _walk(a)
