"""The pattern language shared by rule discovery, the prover, the rule files and the νGraph.

A rule is data: ``lhs => rhs if conditions``, written as s-expressions over registry op names.

    (matmul (mul ?A ?c) ?B)  =>  (mul (matmul ?A ?B) ?c)   if (= (rank ?c) 0)
    (sum (transpose ?X :perm [1 0]) :axes [0] :keepdims false)  =>  (sum ?X :axes [1] :keepdims false)

- ``?X`` is a pattern variable. In a tensor position it matches a tensor; after ``:attr`` it matches
  that attribute's value (so ``:slope ?s`` binds the slope).
- ``:attr value`` fixes an attribute: ints, floats (``inf``, ``-inf``), ``true``/``false``, strings in
  double quotes, int lists ``[1 0]``, dtype names as strings. An attribute left out of a left-hand
  side matches anything (and is not available to the right-hand side); left out of a right-hand side
  it takes the op's default.
- Conditions are comparisons ``= != < <= > >=`` joined by ``and``, over ``(dim ?X i)`` (negative
  ``i`` counts from the end), ``(rank ?X)``, ``(shape ?X)`` (whole shapes compare with ``=``),
  ``(dtype ?X)``, ``(promote d1 d2)`` (the dtype of an element-wise op over d1 and d2), attribute
  variables (a ``dim`` attribute is its size), numbers and ``+ - * / min max``; a ``dims``
  attribute variable compares by ``=`` with a list of size expressions: ``(= ?shape0 [(dim ?x 0) 1])``.
  Sizes in conditions are symbolic: ``(= (dim ?x 1) 1)`` holds where the dim *is* 1, not where a
  named dim happens to be bound to 1, and two named dims are never equal by coincidence of sizes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Union

from axon_eg.errors import AxonError
from axon_eg.ir import ops as O


class PatternError(AxonError, ValueError):
    """A malformed pattern or rule (names the rule and the offending piece)."""


@dataclass(frozen=True)
class Var:
    name: str  # without the leading "?"

    def __str__(self) -> str:
        return f"?{self.name}"


@dataclass(frozen=True)
class App:
    op: str
    args: tuple[Pattern, ...]
    attrs: tuple[tuple[str, Any], ...] = ()  # values: literals or Var

    def attr(self, name: str, default: Any = None) -> Any:
        return dict(self.attrs).get(name, default)

    def __str__(self) -> str:
        parts = [self.op] + [f":{k} {format_value(v)}" for k, v in self.attrs] + [str(a) for a in self.args]
        return "(" + " ".join(parts) + ")"


Pattern = Union[Var, App]

# Conditions are plain s-expression trees: str (symbol or ?var), int, float, bool, list.
Cond = Any


@dataclass(frozen=True)
class Rule:
    name: str
    lhs: App
    rhs: Pattern
    conditions: tuple[Cond, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    context: tuple[App, ...] = ()
    """Patterns that must match *other* e-classes of the graph for the rule to apply (``with``): they bind
    variables the right-hand side uses and the left-hand side does not (two GEMMs that read the same
    operand merge into one: the sibling GEMM is the context). The proof covers the rule for every value of
    those variables, so the context only narrows where it is applied. A rule with a context makes e-nodes
    its own context can match, so the νGraph runs it once (``NuGraph.saturate``)."""

    def __hash__(self) -> int:  # conditions are lists (s-expressions): hash the text instead
        return hash((self.name, str(self)))

    def __str__(self) -> str:
        text = f"{self.lhs}  =>  {self.rhs}"
        if self.context:
            text += "   with " + " ".join(str(c) for c in self.context)
        if self.conditions:
            text += "   if " + " ".join(format_sexp(c) for c in self.conditions)
        return text

    def variables(self) -> tuple[set[str], set[str]]:
        """(tensor variables, attribute variables) the rule binds: its left-hand side's and its context's."""
        tensors, attrs = _vars(self.lhs)
        for c in self.context:
            t, a = _vars(c)
            tensors |= t
            attrs |= a
        return tensors, attrs

    def bound_patterns(self) -> tuple[App, ...]:
        """The patterns that bind the rule's variables: the left-hand side, then the context."""
        return (self.lhs, *self.context)


def attribute_kinds(rule: Rule) -> dict[str, str]:
    """Attribute variable -> the registry kind (``dim``, ``dims``, ``float``, ``dtype``, ...) of the
    attribute it is bound at on the left-hand side."""
    kinds: dict[str, str] = {}
    for node in (n for p in rule.bound_patterns() for n in walk(p)):
        if isinstance(node, App):
            declared = {a.name: a.kind.removeprefix("optional_") for a in O.get(node.op).attrs}
            for name, value in node.attrs:
                if isinstance(value, Var):
                    kinds.setdefault(value.name, declared[name])
    return kinds


def _vars(p: Pattern) -> tuple[set[str], set[str]]:
    tensors: set[str] = set()
    attrs: set[str] = set()
    for node in walk(p):
        if isinstance(node, Var):
            tensors.add(node.name)
        else:
            attrs |= {v.name for _, v in node.attrs if isinstance(v, Var)}
    return tensors, attrs


def walk(p: Pattern) -> Iterator[Pattern]:
    yield p
    if isinstance(p, App):
        for a in p.args:
            yield from walk(a)


# ------------------------------------------------------------------------------------------------
# s-expressions
# ------------------------------------------------------------------------------------------------
_TOKEN = re.compile(r'\s*(?:(\()|(\))|(\[)|(\])|("(?:[^"\\]|\\.)*")|([^\s()\[\]]+))')


def parse_sexp(text: str) -> Any:
    """Parse one s-expression: lists from () and [] (brackets become tuples), atoms typed."""
    tokens = [m for m in _TOKEN.finditer(text) if m.group(0).strip()]
    pos = 0

    def atom(tok: str) -> Any:
        if tok in ("true", "false"):
            return tok == "true"
        if tok in ("inf", "+inf", "-inf"):
            return -math.inf if tok.startswith("-") else math.inf
        try:
            return int(tok)
        except ValueError:
            pass
        try:
            return float(tok)
        except ValueError:
            return tok

    def read() -> Any:
        nonlocal pos
        if pos >= len(tokens):
            raise PatternError(f"unexpected end of {text!r}")
        m = tokens[pos]
        pos += 1
        if m.group(1) or m.group(3):
            close = ")" if m.group(1) else "]"
            items = []
            while pos < len(tokens) and tokens[pos].group(0).strip() != close:
                items.append(read())
            if pos >= len(tokens):
                raise PatternError(f"missing {close!r} in {text!r}")
            pos += 1
            return items if close == ")" else tuple(items)
        if m.group(2) or m.group(4):
            raise PatternError(f"unexpected {m.group(0).strip()!r} in {text!r}")
        if m.group(5):
            return _Str(m.group(5)[1:-1].replace('\\"', '"'))
        return atom(m.group(6))

    value = read()
    if pos != len(tokens):
        raise PatternError(f"trailing text after the expression in {text!r}")
    return value


class _Str(str):
    """A quoted string literal (as opposed to a symbol)."""


def format_value(v: Any) -> str:
    if isinstance(v, Var):
        return str(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, tuple):
        return "[" + " ".join(format_value(x) for x in v) + "]"
    if isinstance(v, str):
        return '"' + v.replace('"', '\\"') + '"'
    return str(v)


def format_sexp(x: Any) -> str:
    if isinstance(x, list):
        return "(" + " ".join(format_sexp(i) for i in x) + ")"
    if isinstance(x, tuple):
        return "[" + " ".join(format_sexp(i) for i in x) + "]"
    if isinstance(x, _Str):
        return format_value(str(x))
    if isinstance(x, str):
        return x
    return format_value(x)


def parse_pattern(text: str | Any, *, rule: str = "?") -> Pattern:
    """Parse a pattern from text or an already parsed s-expression; checks ops and attributes."""
    sexp = parse_sexp(text) if isinstance(text, str) else text
    return _to_pattern(sexp, rule)


def _to_pattern(x: Any, rule: str) -> Pattern:
    if isinstance(x, str) and not isinstance(x, _Str) and x.startswith("?"):
        return Var(x[1:])
    if not isinstance(x, list) or not x or not isinstance(x[0], str):
        raise PatternError(f"rule {rule}: expected (op ...) or ?var, got {format_sexp(x)}")
    try:
        op = O.get(x[0])
    except O.UnknownOperation:
        raise PatternError(f"rule {rule}: unknown op {x[0]!r}") from None
    args: list[Pattern] = []
    attrs: list[tuple[str, Any]] = []
    known = {a.name: a for a in op.attrs}
    items = x[1:]
    i = 0
    while i < len(items):
        item = items[i]
        if isinstance(item, str) and not isinstance(item, _Str) and item.startswith(":"):
            name = item[1:]
            if name not in known:
                raise PatternError(f"rule {rule}: op {op.name} has no attribute {name!r}")
            if i + 1 >= len(items):
                raise PatternError(f"rule {rule}: attribute :{name} of {op.name} has no value")
            raw = items[i + 1]
            if isinstance(raw, str) and not isinstance(raw, _Str) and raw.startswith("?"):
                value: Any = Var(raw[1:])
            else:
                try:
                    value = known[name].coerce(op.name, str(raw) if isinstance(raw, _Str) else raw)
                except O.InvalidAttribute as e:
                    raise PatternError(f"rule {rule}: {e}") from None
            attrs.append((name, value))
            i += 2
        else:
            args.append(_to_pattern(item, rule))
            i += 1
    order = [a.name for a in op.attrs]
    attrs.sort(key=lambda kv: order.index(kv[0]))
    try:
        op.check_arity(len(args))
    except O.InvalidAttribute as e:
        raise PatternError(f"rule {rule}: {e}") from None
    return App(op.name, tuple(args), tuple(attrs))


def parse_rule(name: str, lhs: str, rhs: str, conditions: tuple[str, ...] | list[str] = (),
               context: tuple[str, ...] | list[str] = (), **meta: Any) -> Rule:
    """Build and check a Rule: rhs and condition variables must be bound by the lhs (or its context)."""
    left = parse_pattern(lhs, rule=name)
    if not isinstance(left, App):
        raise PatternError(f"rule {name}: the left-hand side must be an op application, got {left}")
    right = parse_pattern(rhs, rule=name)
    conds = tuple(parse_sexp(c) if isinstance(c, str) else c for c in conditions)
    ctx = tuple(parse_pattern(c, rule=name) for c in context)
    for c in ctx:
        if not isinstance(c, App):
            raise PatternError(f"rule {name}: a context pattern must be an op application, got {c}")
    rule = Rule(name, left, right, conds, dict(meta), ctx)
    check_rule(rule)
    return rule


def check_rule(rule: Rule) -> None:
    tensors, attrs = rule.variables()
    if tensors & attrs:
        raise PatternError(f"rule {rule.name}: ?{sorted(tensors & attrs)[0]} is used as a tensor and an attribute")
    r_tensors, r_attrs = _vars(rule.rhs)
    for v in sorted(r_tensors - tensors):
        raise PatternError(f"rule {rule.name}: right-hand side uses ?{v}, which the left-hand side does not bind")
    used = r_tensors | {x[1:] for c in rule.conditions for x in _symbols(c) if x.startswith("?")}
    for c in rule.context:
        for v in sorted(_vars(c)[0] - _vars(rule.lhs)[0] - used):
            raise PatternError(f"rule {rule.name}: context {c} binds ?{v}, which nothing uses")
    for v in sorted(r_attrs - attrs):
        raise PatternError(f"rule {rule.name}: right-hand side uses attribute ?{v}, unbound on the left")
    sizes = size_variables(rule)
    for c in rule.conditions:
        for sym in _symbols(c):
            if sym.startswith("?") and sym[1:] not in tensors | attrs | sizes:
                raise PatternError(f"rule {rule.name}: condition {format_sexp(c)} uses unbound {sym}")
    for node in walk(rule.rhs):
        if isinstance(node, App):
            given = {k for k, _ in node.attrs}
            for a in O.get(node.op).attrs:
                if a.required and a.name not in given:
                    raise PatternError(f"rule {rule.name}: right-hand side {node.op} needs attribute :{a.name}")


def size_variables(rule: Rule) -> set[str]:
    """Condition variables the left-hand side does not bind but a condition gives a value: a whole
    entry of a list a ``dims`` attribute is compared with (``(= ?shape0 [?size_M (dim ?x 0)])``)."""
    tensors, attrs = rule.variables()
    out: set[str] = set()
    for c in rule.conditions:
        for sub in _lists(c):
            if len(sub) == 3 and sub[0] == "=" and isinstance(sub[2], tuple):
                out |= {x[1:] for x in sub[2] if isinstance(x, str) and not isinstance(x, _Str) and x.startswith("?")}
    return out - tensors - attrs


def _lists(x: Any) -> Iterator[list]:
    if isinstance(x, list):
        yield x
        for i in x:
            yield from _lists(i)


def _symbols(x: Any) -> Iterator[str]:
    if isinstance(x, (list, tuple)):
        for i in x:
            yield from _symbols(i)
    elif isinstance(x, str) and not isinstance(x, _Str):
        yield x



# ------------------------------------------------------------------------------------------------
# Matching a pattern against a program's nodes (the recognisers: ``extract/recognisers.py``)
# ------------------------------------------------------------------------------------------------
@dataclass
class NodeMatch:
    """A pattern matched at a program node: each tensor variable's node, each attribute variable's value, and
    the nodes the pattern's ops matched (``matched``); or, where it did not match, ``why``: the first node that
    deviates and what the pattern expected there."""

    nodes: dict[str, int] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)
    matched: set[int] = field(default_factory=set)
    why: str = ""

    def __bool__(self) -> bool:
        return not self.why


def _plain(v: Any) -> Any:
    """An attribute value as matching compares it: lists and tuples alike, None as the empty tuple."""
    if v is None:
        return ()
    return tuple(_plain(x) for x in v) if isinstance(v, (list, tuple)) else v


def match_node(pattern: Pattern, program: Any, node: int, *, inside: set[int] | frozenset[int] | None = None,
               given: NodeMatch | None = None) -> NodeMatch:
    """``pattern`` matched at ``node`` of ``program`` (an ``ir.program.Program``). Every op of the pattern must
    be a node ``inside`` (when given: a fusion group's nodes), with the pattern's arguments in order and its
    literal attributes; a variable used twice must bind the same node (tensor) or an equal value (attribute).
    ``given`` continues an earlier match (its bindings hold). Returns the bindings, or a falsy match whose
    ``why`` names the first node that deviates."""
    out = NodeMatch(dict(given.nodes), dict(given.attrs), set(given.matched)) if given is not None else NodeMatch()

    def go(p: Pattern, n: int) -> str:
        if isinstance(p, Var):
            bound = out.nodes.setdefault(p.name, n)
            return "" if bound == n else f"node {n} is not ?{p.name} (node {bound})"
        found = program.nodes[n]
        if inside is not None and n not in inside:
            return f"expected {p.op}, found node {n} ({found.op}) outside the group"
        if found.op != p.op:
            return f"expected {p.op}, found {found.op} (node {n})"
        if len(found.inputs) != len(p.args):
            return f"{p.op} (node {n}) has {len(found.inputs)} inputs, the pattern {len(p.args)}"
        for name, want in p.attrs:
            got = _plain(found.attrs.get(name))
            if isinstance(want, Var):
                bound = out.attrs.setdefault(want.name, got)
                if bound != got:
                    return f"{p.op} (node {n}): :{name} {got} is not ?{want.name} ({bound})"
            elif got != _plain(want):
                return f"{p.op} (node {n}): :{name} is {got}, not {_plain(want)}"
        out.matched.add(n)
        for a, j in zip(p.args, found.inputs):
            why = go(a, j)
            if why:
                return why
        return ""

    out.why = go(pattern, node)
    return out


def match_first(patterns: Iterator[Pattern] | list[Pattern] | tuple[Pattern, ...], program: Any, node: int, *,
                inside: set[int] | frozenset[int] | None = None, given: NodeMatch | None = None) -> NodeMatch:
    """The first of ``patterns`` that matches at ``node``, else the first one's mismatch."""
    first = None
    for p in patterns:
        got = match_node(p, program, node, inside=inside, given=given)
        if got:
            return got
        first = first or got
    return first if first is not None else NodeMatch(why="no pattern")
