"""Compile pattern-language rules (``patterns.Rule``) into egglog rewrites at run time.

A rule with conditions is two egglog rules: the first matches the left-hand side alone and records the
match (its variables) in a relation of its own (ruleset ``<rs>_match``), the second reads that relation,
checks the conditions and rewrites (ruleset ``<rs>``, named as the rule); the νGraph runs the first then the
second in each iteration (``match_ruleset``). One query holding the pattern and the conditions (lookups of
``gshape`` on its variables) made egglog 13.2 return a match the pattern does not have: a batchnorm fold
rule matched the folded bias's e-class, which merged tensors of different shapes (and, where the shapes
happened to agree, made an e-node that disagrees with its class)."""

from __future__ import annotations

import itertools
import math
from typing import Any

from . import schema as S
from .convert import attr_to_egg
from .patterns import App, Pattern, PatternError, Rule, Var, _Str, attribute_kinds, format_sexp, walk

_COMPARISONS = {"=": "=", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_ARITH = {"+", "-", "*", "/", "min", "max"}


def egg_var(name: str) -> str:
    return f"v_{name}"


def _pattern(p: Pattern, side: str, rule: Rule, fresh: itertools.count) -> str:
    if isinstance(p, Var):
        return egg_var(p.name)
    c = S.constructor_for(p.op, len(p.args))
    given = dict(p.attrs)
    parts = [c.name] + [_pattern(a, side, rule, fresh) for a in p.args]
    for a in c.op.attrs:
        if a.name in given:
            v = given[a.name]
            parts.append(egg_var(v.name) if isinstance(v, Var) else attr_to_egg(a.kind, v))
        elif side == "lhs":
            parts.append(f"w_{next(fresh)}")  # matches any value
        elif a.required:
            raise PatternError(f"rule {rule.name}: right-hand side {p.op} needs attribute :{a.name}")
        else:
            parts.append(attr_to_egg(a.kind, a.default))
    return "(" + " ".join(parts) + ")"


def _expr(x: Any, rule: Rule, kinds: dict[str, str]) -> str:
    """A condition sub-expression: dims, ranks, dtypes, attribute variables, numbers, arithmetic.
    Shapes are the *symbolic* ones (``gshape``: every named dim a distinct generic value), so a
    condition holds in the νGraph exactly when it holds for every size of the program's dims."""
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        return ("inf" if x > 0 else "-inf") if math.isinf(x) else repr(x)
    if isinstance(x, _Str):
        return f'"{x}"'
    if isinstance(x, str) and x.startswith("?"):
        kind = kinds.get(x[1:])
        if kind == "dim":
            return f"(gval {egg_var(x[1:])})"
        if kind == "dims":
            raise PatternError(f"rule {rule.name}: the dims attribute {x} compares only with a list [..] by =")
        return egg_var(x[1:])
    if isinstance(x, list) and x:
        head, args = x[0], x[1:]
        if head == "dim" and len(args) == 2 and isinstance(args[1], int):
            shape = f"(gshape {_expr(args[0], rule, kinds)})"
            index = args[1] if args[1] >= 0 else f"(+ (vec-length {shape}) {args[1]})"
            return f"(vec-get {shape} {index})"
        if head == "rank" and len(args) == 1:
            return f"(vec-length (gshape {_expr(args[0], rule, kinds)}))"
        if head == "dtype" and len(args) == 1:
            return f"(dtype {_expr(args[0], rule, kinds)})"
        if head == "promote" and len(args) == 2:
            return f"(promote {_expr(args[0], rule, kinds)} {_expr(args[1], rule, kinds)})"
        if head == "shape" and len(args) == 1:
            return f"(gshape {_expr(args[0], rule, kinds)})"
        if head in _ARITH and len(args) == 2:
            return f"({head} {_expr(args[0], rule, kinds)} {_expr(args[1], rule, kinds)})"
    raise PatternError(f"rule {rule.name}: cannot compile condition term {format_sexp(x)}")


def _facts(cond: Any, rule: Rule, kinds: dict[str, str]) -> list[str]:
    if isinstance(cond, list) and cond and cond[0] == "and":
        return [f for c in cond[1:] for f in _facts(c, rule, kinds)]
    if isinstance(cond, list) and len(cond) == 3 and cond[0] == "=" and isinstance(cond[2], tuple):
        var = cond[1]
        if not (isinstance(var, str) and var.startswith("?") and kinds.get(var[1:]) == "dims"):
            raise PatternError(f"rule {rule.name}: a list [..] compares only with a dims attribute: {format_sexp(cond)}")
        v = egg_var(var[1:])
        return [f"(= (vec-length {v}) {len(cond[2])})"] + [
            f"(= (gval (vec-get {v} {i})) {_expr(e, rule, kinds)})" for i, e in enumerate(cond[2])]
    if isinstance(cond, list) and len(cond) == 3 and cond[0] in _COMPARISONS:
        return [f"({_COMPARISONS[cond[0]]} {_expr(cond[1], rule, kinds)} {_expr(cond[2], rule, kinds)})"]
    raise PatternError(f"rule {rule.name}: conditions must be comparisons joined by 'and', got {format_sexp(cond)}")


def match_ruleset(rule: Rule, ruleset: str) -> str | None:
    """The ruleset of the rule's matching stage, run before ``ruleset`` (None: one stage; module docstring)."""
    return f"{ruleset}_match" if rule.conditions else None


def compile_rule(rule: Rule, ruleset: str) -> str:
    """The egglog rule(s) for one rewrite, in its own ruleset(s), recording which e-nodes it made."""
    fresh = itertools.count()
    lhs = _pattern(rule.lhs, "lhs", rule, fresh)
    # a context pattern matches another e-class than the matched one and than each other (``Rule.context``)
    ctx = [f"ctx_{k}" for k in range(len(rule.context))]
    binding = [f"(= matched {lhs})"] + [f"(= {c} {_pattern(p, 'lhs', rule, fresh)})" for c, p in zip(ctx, rule.context)]
    binding += [f"(!= {a} {b})" for a, b in itertools.combinations(["matched", *ctx], 2)]
    rhs = _pattern(rule.rhs, "rhs", rule, fresh)
    kinds = attribute_kinds(rule)
    facts = [f for c in rule.conditions for f in _facts(c, rule, kinds)]
    actions = [f"(union matched {rhs})"]
    for node in walk(rule.rhs):
        if isinstance(node, App):
            c = S.constructor_for(node.op, len(node.args))
            args = _pattern(node, "rhs", rule, fresh)[len(c.name) + 2:-1]
            actions.append(f'({S.made_relation(c)} {args} "{rule.name}")')
    stage = match_ruleset(rule, ruleset)
    if stage is None:
        query = " ".join([*binding, *facts])
        return f'(rule ({query}) ({" ".join(actions)}) :ruleset {ruleset} :name "{rule.name}")'
    tensors, attrs = rule.variables()
    variables = [("matched", "T")] + [(egg_var(t), "T") for t in sorted(tensors)] + \
        [(egg_var(a), S.ATTR_SORTS[kinds[a]]) for a in sorted(attrs)]
    hit = f"hit_{ruleset}"
    names = " ".join(v for v, _ in variables)
    return "\n".join([
        f"(relation {hit} ({' '.join(sort for _, sort in variables)}))",
        f"(ruleset {stage})",
        f'(rule ({" ".join(binding)}) (({hit} {names})) :ruleset {stage} :name "{rule.name}~match")',
        f'(rule (({hit} {names}) {" ".join(facts)}) ({" ".join(actions)}) :ruleset {ruleset} :name "{rule.name}")',
    ])


__all__ = ["App", "Rule", "Var", "compile_rule", "egg_var", "match_ruleset"]
