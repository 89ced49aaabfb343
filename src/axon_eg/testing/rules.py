"""Random concrete matches of a rule, as the νGraph could bind it: the instance property's generator.

A proof covers a rule only if the rule says what was proved; this generator does not read the
proof. It draws what the e-graph matcher may bind — ranks (where no condition fixes them), sizes
from :data:`EDGE_SIZES` (1, odd, powers of two and one past, very unequal), any value for an
attribute variable no condition pins (a reshape target with size-1 axes inserted or removed, a
broadcast target, slice bounds, a convolution's groups, stride, dilation and padding, the padding at
least what makes the window fit), constant values of the sign a condition asks for — keeps the draws
whose conditions hold (``instantiate.holds``), builds both sides with the Builder and returns them
bound, ready for a float64 comparison (``compare``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from axon_eg.egraph.patterns import App, Pattern, Rule, Var, attribute_kinds
from axon_eg.errors import AxonError
from axon_eg.ir.builder import Builder, Value
from axon_eg.ir.inputs import positive_inputs
from axon_eg.ir.interpret import interpret
from axon_eg.ir.program import Program
from axon_eg.rules_discovered.instantiate import (
    Binding,
    _value,
    flat_conditions,
    holds,
    is_pointwise,
    ranks,
    scalar_variables,
    symbolic_attributes,
    tensor_variables,
)
from axon_eg.semantics.op_semantics import SYMBOLIC_ATTRIBUTES

EDGE_SIZES = (1, 2, 3, 5, 7, 16, 17)
MAX_NUMEL = 1 << 14  # draws with a larger value are redrawn smaller
DTYPE = "fp32"


@dataclass(frozen=True)
class Match:
    """One concrete application: both sides bound, and the binding that was drawn."""

    lhs: Program
    rhs: Program | None  # None: the right-hand side does not build on this match (a finding)
    binding: Binding
    scalars: Mapping[str, float]
    error: str = ""

    def describe(self) -> str:
        shapes = ", ".join(f"{k}: {list(v)}" for k, v in self.binding.shapes.items())
        attrs = ", ".join(f"{k} = {v}" for k, v in self.binding.attrs.items())
        return f"{shapes}" + (f"; {attrs}" if attrs else "")


class NoMatch(AxonError):
    """No draw satisfied the rule's conditions within the attempts (rare: tight conditions)."""


def _repair(rule: Rule, shapes: dict[str, list[int]], attrs: Mapping[str, Any] | None = None) -> None:
    """Make the simple size conditions true: (= (dim ?x i) c) and (= (dim ?x i) (dim ?y j)), and, with
    ``attrs`` (int attributes drawn first, a conv's groups), (= (dim ?x i) EXPR) for an arithmetic EXPR of
    dims and those attributes: (= (dim ?x 1) (* (dim ?w 1) ?groups))."""
    for _ in range(3):
        for c in flat_conditions(rule):
            if not (isinstance(c, list) and len(c) == 3 and c[0] == "=" and isinstance(c[1], list) and c[1][:1] == ["dim"]):
                continue
            x, i = c[1][1][1:], c[1][2]
            if x not in shapes or not -len(shapes[x]) <= i < len(shapes[x]):
                continue
            if isinstance(c[2], int):
                shapes[x][i] = c[2]
            elif isinstance(c[2], list) and c[2][:1] == ["dim"]:
                y, j = c[2][1][1:], c[2][2]
                if y in shapes and -len(shapes[y]) <= j < len(shapes[y]):
                    shapes[x][i] = shapes[y][j]
            elif attrs and isinstance(c[2], list) and c[2][:1] in (["*"], ["+"]):
                try:
                    value = _value(c[2], Binding({k: tuple(v) for k, v in shapes.items()}, {}, attrs), {})
                except (KeyError, IndexError, TypeError):
                    continue
                if isinstance(value, int) and value >= 1:
                    shapes[x][i] = value


def _broadcastable(rng: np.random.Generator, ranks: Mapping[str, int], names: list[str]) -> dict[str, list[int]]:
    """Shapes for a pointwise rule's variables: suffixes of one output shape, some axes of size 1."""
    rank = max(ranks.values())
    out = [int(rng.choice(EDGE_SIZES)) for _ in range(rank)]
    shapes = {}
    for n in names:
        r = ranks[n]
        shapes[n] = [1 if rng.random() < 0.3 else d for d in out[rank - r:]]
    return shapes


class _Drawer:
    def __init__(self, rule: Rule, rng: np.random.Generator):
        self.rule, self.rng = rule, rng
        self.kinds = attribute_kinds(rule)
        self.tensors = tensor_variables(rule)
        self.scalars = scalar_variables(rule)
        self.pinned = {c[1][1:] for c in flat_conditions(rule)
                       if isinstance(c, list) and len(c) == 3 and c[0] == "=" and isinstance(c[1], str)
                       and c[1][1:] in self.kinds}
        self.symbolic = symbolic_attributes(rule)

    def early_attributes(self) -> dict[str, Any]:
        """Values for the symbolic int attributes (a conv's groups), drawn before the shapes that size
        conditions tie to them."""
        return {v: int(self.rng.choice((1, 1, 2, 3))) for v, (op, name) in self.symbolic.items()
                if self.kinds.get(v) == "int"}

    def shapes(self, attrs: Mapping[str, Any] | None = None) -> dict[str, list[int]]:
        fixed = ranks(self.rule)
        free = [t for t in self.tensors if t not in fixed]
        pointwise = is_pointwise(self.rule)
        for t in free:
            fixed[t] = int(self.rng.integers(0 if pointwise else 1, 4))
        if pointwise and free and len(free) == len(self.tensors):
            return _broadcastable(self.rng, fixed, self.tensors)
        shapes = {t: [int(self.rng.choice(EDGE_SIZES)) for _ in range(fixed[t])] for t in self.tensors}
        if self.rng.random() < 0.3:  # very unequal: one axis long, the others 1
            for s in shapes.values():
                for i in range(len(s)):
                    s[i] = 1 if self.rng.random() < 0.5 else s[i]
        _repair(self.rule, shapes, attrs)
        return shapes

    def scalar(self, name: str) -> float:
        sign = 1.0
        for c in flat_conditions(self.rule):
            if isinstance(c, list) and len(c) == 3 and c[1] == f"?{name}" and c[2] == 0:
                sign = {"<": -1.0}.get(c[0], 1.0)
                break
        else:
            sign = float(self.rng.choice((-1.0, 1.0)))
        return sign * float(np.exp(self.rng.uniform(np.log(0.05), np.log(20.0))))

    def attribute(self, node: App, name: str, var: str, shapes: list[tuple[int, ...]], attrs: dict[str, Any]) -> Any:
        """A value the matcher could bind for an unpinned attribute variable at ``node``."""
        x = shapes[0] if shapes else ()
        if node.op == "reshape":
            return _reshape_target(self.rng, x)
        if node.op == "broadcast_to":
            return _broadcast_target(self.rng, x)
        if node.op in SYMBOLIC_ATTRIBUTES and len(shapes) >= 2:  # a conv: any stride, dilation, padding
            return _conv_attribute(self.rng, name, shapes[0], shapes[1], attrs)
        if node.op == "slice" and name in ("start", "stop"):
            size = x[attrs.get("axis", 0)] if x else 1
            start = attrs.get("start", 0)
            if name == "start":
                return int(self.rng.integers(0, size))
            return int(self.rng.integers(min(start + 1, size), size + 1))
        raise NoMatch(f"cannot draw attribute ?{var} of {node.op}")


def _conv_attribute(rng: np.random.Generator, name: str, x: tuple[int, ...], w: tuple[int, ...],
                    attrs: Mapping[str, Any]) -> Any:
    """A conv's per-axis stride (1..3), dilation (1..2) or padding (0..2, or what makes the dilated
    window fit the padded input); the attributes are drawn in declaration order, dilation after padding,
    so the padding makes room for the largest dilation."""
    n = len(x) - 2
    if name == "groups":
        return int(rng.choice((1, 2, 3)))
    if name == "stride":
        return tuple(int(rng.integers(1, 4)) for _ in range(n))
    if name == "dilation":
        pad = attrs.get("padding", (0,) * n)
        return tuple(int(rng.choice([d for d in (1, 2) if x[2 + j] + 2 * pad[j] >= d * (w[2 + j] - 1) + 1] or [1]))
                     for j in range(n))
    return tuple(max(int(rng.integers(0, 3)), -(-(2 * (w[2 + j] - 1) + 1 - x[2 + j]) // 2)) for j in range(n))


def _reshape_target(rng: np.random.Generator, x: tuple[int, ...]) -> tuple[int, ...]:
    dims = [d for d in x if d != 1] if rng.random() < 0.5 else list(x)
    if len(dims) >= 2 and rng.random() < 0.3:
        i = int(rng.integers(0, len(dims) - 1))
        dims[i:i + 2] = [dims[i] * dims[i + 1]]
    for _ in range(int(rng.integers(0, 3))):
        dims.insert(int(rng.integers(0, len(dims) + 1)), 1)
    return tuple(dims) if dims else (1,) if rng.random() < 0.5 else ()


def _broadcast_target(rng: np.random.Generator, x: tuple[int, ...]) -> tuple[int, ...]:
    out = [int(rng.choice(EDGE_SIZES)) if d == 1 and rng.random() < 0.5 else d for d in x]
    lead = [int(rng.choice(EDGE_SIZES)) for _ in range(int(rng.integers(0, 3)))]
    return tuple(lead + out)


def _build(drawer: _Drawer, pattern: Pattern, b: Builder, env: dict[str, Value], attrs: dict[str, Any],
           scalars: Mapping[str, float], binding: dict[str, tuple[int, ...]]) -> Value:
    if isinstance(pattern, Var):
        return env[pattern.name]
    if pattern.op == "constant":
        value = pattern.attr("value")
        v = scalars[value.name] if isinstance(value, Var) else value
        return b.constant(v, DTYPE)
    args = [_build(drawer, a, b, env, attrs, scalars, binding) for a in pattern.args]
    given: dict[str, Any] = {}
    for name, v in pattern.attrs:
        if not isinstance(v, Var):
            given[name] = v
            continue
        if v.name not in attrs:
            if v.name in drawer.pinned:
                attrs[v.name] = _pinned_value(drawer.rule, v.name, binding, drawer.rng)
            else:
                attrs[v.name] = drawer.attribute(pattern, name, v.name, [tuple(int(d) for d in a.shape) for a in args], given)
        given[name] = attrs[v.name]
    return b.emit(pattern.op, *args, **given)


def _pinned_value(rule: Rule, var: str, shapes: Mapping[str, tuple[int, ...]], rng: np.random.Generator) -> Any:
    """The value a condition pins ``?var`` to; size variables in it take random sizes."""
    for c in flat_conditions(rule):
        if isinstance(c, list) and len(c) == 3 and c[0] == "=" and c[1] == f"?{var}":
            env = Binding(shapes, {}, {})
            sizes: dict[str, int] = {}

            def one(e: Any) -> int:
                if isinstance(e, str) and e.startswith("?"):
                    return sizes.setdefault(e, int(rng.choice(EDGE_SIZES)))
                return int(_value(e, env, {}))

            return tuple(one(e) for e in c[2]) if isinstance(c[2], tuple) else one(c[2])
    raise NoMatch(f"no condition pins ?{var}")


def draw_match(rule: Rule, rng: np.random.Generator, attempts: int = 60) -> Match:
    """One random concrete match of ``rule`` (both sides built on it); NoMatch after ``attempts``."""
    drawer = _Drawer(rule, rng)
    last = "no attempt"
    for _ in range(attempts):
        early = drawer.early_attributes()
        shapes = {k: tuple(v) for k, v in drawer.shapes(early).items()}
        if any(math.prod(s) > MAX_NUMEL for s in shapes.values()):
            continue
        scalars = {s: drawer.scalar(s) for s in drawer.scalars}
        attrs: dict[str, Any] = dict(early)
        try:
            b = Builder(rule.name)
            env = {t: b.input(t, shapes[t], DTYPE) for t in drawer.tensors}
            lhs = b.build(_build(drawer, rule.lhs, b, env, attrs, scalars, shapes))
        except AxonError as e:
            last = str(e)
            continue  # the matcher would not have matched this: the left side is ill-typed here
        binding = Binding(shapes, {t: DTYPE for t in drawer.tensors}, {**attrs, **scalars,
                                                                      **{k: DTYPE for k, kind in drawer.kinds.items()
                                                                         if kind == "dtype"}})
        if not holds(rule, binding):
            last = "conditions do not hold"
            continue
        b = Builder(rule.name)
        env = {t: b.input(t, shapes[t], DTYPE) for t in drawer.tensors}
        try:
            rhs = b.build(_build(drawer, rule.rhs, b, env, dict(attrs), scalars, shapes))
        except AxonError as e:
            return Match(lhs, None, binding, scalars, str(e))
        return Match(lhs, rhs, binding, scalars)
    raise NoMatch(f"rule {rule.name}: no concrete match in {attempts} draws (last: {last})")


def compare(match: Match, seed: int, rtol: float = 1e-6, atol: float = 1e-8) -> str | None:
    """Why the two sides of a match differ in float64 on random inputs (never zeros), or None."""
    if match.rhs is None:
        return f"the right-hand side does not build ({match.error}) at {match.describe()}"
    rng = np.random.default_rng(seed)
    positive = positive_inputs(match.lhs) | positive_inputs(match.rhs)
    inputs = {}
    for spec, node in zip(match.lhs.inputs, match.lhs.input_ids):
        shape = match.lhs.concrete_shape(node)
        magnitude = rng.uniform(0.25, 2.0, size=shape)
        inputs[spec.name] = np.asarray(magnitude if spec.name in positive else magnitude * rng.choice((-1.0, 1.0), size=shape))
    a, b = interpret(match.lhs, inputs), interpret(match.rhs, inputs)
    if a.shape != b.shape:
        return f"shapes {a.shape} vs {b.shape} at {match.describe()}"
    if not np.array_equal(np.isfinite(a), np.isfinite(b)):
        return f"one side is not finite where the other is, at {match.describe()}"
    finite = np.isfinite(a)
    if finite.any() and not np.allclose(a[finite], b[finite], rtol=rtol, atol=atol):
        return f"max |lhs - rhs| = {float(np.max(np.abs(a[finite] - b[finite]))):.3g} at {match.describe()}"
    return None


__all__ = ["EDGE_SIZES", "Match", "NoMatch", "compare", "draw_match"]
