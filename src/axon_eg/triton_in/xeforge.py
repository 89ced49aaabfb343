"""Xe-Forge's spec form, read as its users write it (next to axon_eg's own, :mod:`axon_eg.triton_in.spec`)::

    inputs:                                   # by name: a forward() argument each, shapes over symbols
      X: {shape: [BATCH, IN_FEAT], dtype: float16}
    inits:                                    # the Model's __init__ arguments
      - {dim: IN_FEAT}                        # a size set's dim (by the constructor's parameter of that name
      - {dim: OUT_FEAT}                       #   when it has one, else in this order)
      - {value: 0.5}                          # or a value (a bare value too)
    ci:                                       # size-set sections: any name, each a list of size sets
      - params: [X]                           # the forward() arguments in order (default: every input)
        dtype: float16                        # every param's dtype in this set (default: each input's)
        dims: {BATCH: 128, IN_FEAT: 1024, OUT_FEAT: 1024}
        flop: 2*BATCH*IN_FEAT*OUT_FEAT        # a formula over the dims: achieved TFLOP/s are reported
        name: ci-small                        # optional: --sizes ci-small picks it
    bench-gpu:
      - {params: [X], dims: {BATCH: 4096, IN_FEAT: 16384, OUT_FEAT: 16384}, flop: 2*BATCH*IN_FEAT*OUT_FEAT}

A size set is chosen by ``--sizes SECTION`` (its largest set), ``SECTION[i]``, or a set's ``name``; without
``--sizes``, the smallest set of the spec for a quick run and the largest one for ``--full``. Every error is
one line naming the file and the key (``spec FILE: ci[0].dims.BATCH: must be an int >= 1, got 0``).
"""

from __future__ import annotations

import ast
import difflib
import inspect
import math
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .source import TritonInputError
from .spec import DTYPE_ALIASES, _keys, _kind

TOP_KEYS = ("inputs", "inits")
"""The keys of an Xe-Forge spec that are not size-set sections."""
INPUT_KEYS = ("shape", "dtype")
SET_KEYS = ("params", "dtype", "dims", "flop", "name")
INIT_KEYS = ("dim", "value")
_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_SELECTOR = re.compile(r"(?P<section>[A-Za-z_][A-Za-z0-9_.-]*)(\[(?P<index>\d+)\])?\Z")


@dataclass(frozen=True)
class SizeSet:
    """One size set: where it is (``section[index]``), its forward() arguments, dtype override, dims and flop
    formula."""

    section: str
    index: int
    params: tuple[str, ...]
    dtype: str | None
    dims: dict[str, int]
    flop: str | int | None
    name: str | None

    @property
    def key(self) -> str:
        return f"{self.section}[{self.index}]"


@dataclass(frozen=True)
class XeForgeSpec:
    """An Xe-Forge spec checked whole: inputs by name (shape entries ints or symbols, dtype), the init entries
    (``("dim", SYMBOL)`` or ``("value", v)``), and every size set."""

    inputs: dict[str, tuple[tuple[int | str, ...], str]]
    inits: tuple[tuple[str, Any], ...]
    sets: tuple[SizeSet, ...]
    where: str


def is_xeforge(data: Any) -> bool:
    """Whether a spec's data is in Xe-Forge's form: its inputs a mapping by name (axon_eg's are a list)."""
    return isinstance(data, Mapping) and isinstance(data.get("inputs"), Mapping)


def check(data: Mapping[str, Any], where: str) -> XeForgeSpec:
    """The spec checked whole: every key known, every value of its kind, every symbol a size set uses given a
    value by that set's dims; a TritonInputError naming the key otherwise."""
    if "inputs" not in data:
        raise TritonInputError(f"{where}: inputs is missing (a mapping NAME: {{shape: [...], dtype: ...}})")
    raw = data["inputs"]
    if not isinstance(raw, Mapping) or not raw:
        raise TritonInputError(f"{where}: inputs: must be a non-empty mapping NAME: {{shape: [...], dtype: ...}}, got "
                               f"{_kind(raw)}")
    inputs: dict[str, tuple[tuple[int | str, ...], str]] = {}
    for name, item in raw.items():
        key = f"inputs.{name}"
        if not isinstance(name, str) or not _SYMBOL.match(name):
            raise TritonInputError(f"{where}: {key}: an input's name must be an identifier")
        if not isinstance(item, Mapping):
            raise TritonInputError(f"{where}: {key}: must be a mapping {{shape: [...], dtype: ...}}, got {_kind(item)}")
        _keys(item, INPUT_KEYS, where, f"{key}.", "an input has shape and dtype")
        if "shape" not in item:
            raise TritonInputError(f"{where}: {key}.shape is missing (a list of ints >= 1 and dim names)")
        shape = item["shape"]
        if not isinstance(shape, list) or not all(_dim_entry(d) for d in shape):
            raise TritonInputError(f"{where}: {key}.shape: must be a list of ints >= 1 and dim names (e.g. [BATCH, "
                                   f"1024]), got {shape!r}")
        inputs[name] = (tuple(shape), _dtype(item.get("dtype", "fp32"), where, f"{key}.dtype", DTYPE_ALIASES))
    inits = _inits(data.get("inits", []), where)
    sets: list[SizeSet] = []
    for section, value in data.items():
        if section in TOP_KEYS:
            continue
        if not isinstance(value, list) or not value or not all(isinstance(v, Mapping) for v in value):
            near = difflib.get_close_matches(str(section), TOP_KEYS, 1, 0.6)
            mean = f"did you mean '{near[0]}'? " if near else ""
            raise TritonInputError(f"{where}: unknown key '{section}' ({mean}an Xe-Forge spec has inputs, inits and "
                                   "size-set sections, each a list of {params, dtype, dims, flop})")
        for i, entry in enumerate(value):
            sets.append(_size_set(entry, str(section), i, inputs, inits, where, DTYPE_ALIASES))
    if not sets:
        raise TritonInputError(f"{where}: no size set (a section such as ci: or bench-gpu:, a list of {{params, dims}})")
    names = [s.name for s in sets if s.name is not None]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise TritonInputError(f"{where}: two size sets are named {dup!r}")
    return XeForgeSpec(inputs, inits, tuple(sets), where)


def _dim_entry(d: Any) -> bool:
    return (type(d) is int and d >= 1) or (isinstance(d, str) and bool(_SYMBOL.match(d)))


def _dtype(value: Any, where: str, key: str, aliases: Mapping[str, str]) -> str:
    from axon_eg.measure.harness import TORCH_DTYPES  # lazy: loads torch

    text = str(value).removeprefix("torch.").removeprefix("np.").removeprefix("numpy.")
    name = text if text in TORCH_DTYPES else aliases.get(text)
    if not isinstance(value, str) or name not in TORCH_DTYPES:
        near = next(iter(difflib.get_close_matches(text, list(TORCH_DTYPES), 1, 0.5)), None)
        mean = f"did you mean {near!r}? " if near else ""
        raise TritonInputError(f"{where}: {key}: unknown dtype {value!r} ({mean}one of {', '.join(TORCH_DTYPES)}, or "
                               "torch's names: float16, bfloat16, float32, ...)")
    return name


def _inits(raw: Any, where: str) -> tuple[tuple[str, Any], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise TritonInputError(f"{where}: inits: must be a list of the __init__ arguments ({{dim: NAME}} or "
                               f"{{value: v}}), got {_kind(raw)}")
    out = []
    for i, entry in enumerate(raw):
        key = f"inits[{i}]"
        if isinstance(entry, Mapping):
            _keys(entry, INIT_KEYS, where, f"{key}.", "an init is {dim: NAME} or {value: v}")
            if len(entry) != 1:
                raise TritonInputError(f"{where}: {key}: one of dim or value, got {sorted(entry)}")
            (kind, value), = entry.items()
            if kind == "dim" and not (isinstance(value, str) and _SYMBOL.match(value)):
                raise TritonInputError(f"{where}: {key}.dim: must be a dim name, got {value!r}")
            out.append((kind, value))
        elif isinstance(entry, (int, float, bool, str)) or entry is None:
            out.append(("value", entry))
        else:
            raise TritonInputError(f"{where}: {key}: must be {{dim: NAME}}, {{value: v}} or a value, got {_kind(entry)}")
    return tuple(out)


def _size_set(entry: Mapping[str, Any], section: str, i: int, inputs: Mapping[str, Any],
              inits: tuple[tuple[str, Any], ...], where: str, aliases: Mapping[str, str]) -> SizeSet:
    key = f"{section}[{i}]"
    _keys(entry, SET_KEYS, where, f"{key}.", "a size set has " + ", ".join(SET_KEYS))
    params = entry.get("params", list(inputs))
    if not isinstance(params, list) or not params or not all(isinstance(p, str) for p in params):
        raise TritonInputError(f"{where}: {key}.params: must be a non-empty list of input names, got {params!r}")
    for p in params:
        if p not in inputs:
            near = difflib.get_close_matches(p, list(inputs), 1, 0.6)
            mean = f"did you mean {near[0]!r}? " if near else ""
            raise TritonInputError(f"{where}: {key}.params: {p!r} is not an input ({mean}inputs: {', '.join(inputs)})")
    if len(set(params)) != len(params):
        raise TritonInputError(f"{where}: {key}.params: an input named twice in {params!r}")
    dtype = _dtype(entry["dtype"], where, f"{key}.dtype", aliases) if "dtype" in entry else None
    dims = entry.get("dims")
    if not isinstance(dims, Mapping):
        raise TritonInputError(f"{where}: {key}.dims: must be a mapping NAME: int (e.g. {{BATCH: 128}}), got {_kind(dims)}")
    for name, value in dims.items():
        if not isinstance(name, str) or not _SYMBOL.match(name):
            raise TritonInputError(f"{where}: {key}.dims: {name!r} is not a dim name (an identifier)")
        if type(value) is not int or value < 1:
            raise TritonInputError(f"{where}: {key}.dims.{name}: must be an int >= 1, got {value!r}")
    needed = [d for p in params for d in inputs[p][0] if isinstance(d, str)] + [v for k, v in inits if k == "dim"]
    for d in needed:
        if d not in dims:
            near = difflib.get_close_matches(d, [str(n) for n in dims], 1, 0.6)
            mean = f" (did you mean {near[0]!r}?)" if near else ""
            raise TritonInputError(f"{where}: {key}.dims: no value for {d!r}, which "
                                   f"{'an input shape' if any(d in inputs[p][0] for p in params) else 'inits'} "
                                   f"names{mean}")
    flop = entry.get("flop")
    if flop is not None:
        try:
            flop_value(flop, dict(dims))
        except ValueError as exc:
            raise TritonInputError(f"{where}: {key}.flop: {exc}") from None
    name = entry.get("name")
    if name is not None and not isinstance(name, str):
        raise TritonInputError(f"{where}: {key}.name: must be a string, got {name!r}")
    return SizeSet(section, i, tuple(params), dtype, dict(dims), flop, name)


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow, ast.Mod: operator.mod}


def flop_value(formula: str | int | float, dims: Mapping[str, int]) -> float:
    """A size set's ``flop``: a number, or arithmetic (``+ - * / // % **``, parentheses) over its dims.
    ValueError naming what is wrong (an unknown name, another construct, a result that is not positive)."""
    if isinstance(formula, bool) or not isinstance(formula, (str, int, float)):
        raise ValueError(f"must be a number or a formula over the dims, got {formula!r}")
    if isinstance(formula, (int, float)):
        value = float(formula)
    else:
        try:
            tree = ast.parse(formula, mode="eval")
        except SyntaxError:
            raise ValueError(f"{formula!r} is not a formula") from None

        def walk(node: ast.AST) -> float:
            if isinstance(node, ast.Expression):
                return walk(node.body)
            if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
                return float(node.value)
            if isinstance(node, ast.Name):
                if node.id not in dims:
                    raise ValueError(f"{formula!r} names {node.id!r}, which is not one of the set's dims "
                                     f"({', '.join(dims) or 'none'})")
                return float(dims[node.id])
            if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
                return _BINARY[type(node.op)](walk(node.left), walk(node.right))
            if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
                return -walk(node.operand) if isinstance(node.op, ast.USub) else walk(node.operand)
            raise ValueError(f"{formula!r}: only numbers, dim names and + - * / // % ** are allowed")

        try:
            value = walk(tree)
        except ZeroDivisionError:
            raise ValueError(f"{formula!r} divides by zero") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{formula!r} is {value:g} at these dims (a FLOP count is > 0)")
    return value


def select(spec: XeForgeSpec, selector: str | None, small: bool) -> tuple[SizeSet, str]:
    """(the size set, why it): ``selector`` a section (its largest set), ``SECTION[i]`` or a set's name; None:
    the spec's smallest set for a quick run (``small``), its largest otherwise (by the bytes of the inputs)."""
    if selector is None:
        ordered = sorted(spec.sets, key=lambda s: (input_bytes(spec, s), s.key))
        chosen = ordered[0] if small else ordered[-1]
        return chosen, ("its smallest size set, for a quick run (--full for its largest)" if small
                        else "its largest size set (--full)")
    named = [s for s in spec.sets if s.name == selector]
    if named:
        return named[0], f"the size set named {selector!r} (--sizes)"
    m = _SELECTOR.match(selector)
    sections = sorted({s.section for s in spec.sets})
    if m and m.group("section") in sections:
        members = [s for s in spec.sets if s.section == m.group("section")]
        if m.group("index") is None:
            return max(members, key=lambda s: input_bytes(spec, s)), f"the largest set of {m.group('section')} (--sizes)"
        i = int(m.group("index"))
        if i >= len(members):
            raise TritonInputError(f"{spec.where}: --sizes {selector}: {m.group('section')} has {len(members)} size "
                                   f"set(s) (0 .. {len(members) - 1})")
        return members[i], f"--sizes {selector}"
    names = [s.name for s in spec.sets if s.name]
    near = difflib.get_close_matches(selector, sections + names, 1, 0.5)
    mean = f"did you mean {near[0]!r}? " if near else ""
    listed = f"sections: {', '.join(sections)}" + (f"; names: {', '.join(names)}" if names else "")
    raise TritonInputError(f"{spec.where}: --sizes {selector!r} is no size set ({mean}{listed})")


def shapes(spec: XeForgeSpec, chosen: SizeSet) -> list[dict[str, Any]]:
    """The harness's input specs of the set: one per param, in its order, shapes resolved from its dims."""
    out = []
    for i, p in enumerate(chosen.params):
        shape, dtype = spec.inputs[p]
        out.append({"name": f"x{i}", "shape": [chosen.dims[d] if isinstance(d, str) else d for d in shape],
                    "dtype": chosen.dtype or dtype})
    return out


def input_bytes(spec: XeForgeSpec, chosen: SizeSet) -> int:
    from axon_eg.measure.harness import TORCH_DTYPES  # lazy: loads torch

    return sum(math.prod(s["shape"]) * TORCH_DTYPES[s["dtype"]].itemsize for s in shapes(spec, chosen))


def init_args(spec: XeForgeSpec, chosen: SizeSet, model_cls: type) -> list[Any]:
    """The ``Model(*init)`` arguments of the set: an entry ``{dim: NAME}`` goes to the constructor's parameter
    of that name (case and underscores aside) when it has one, the rest fill the others in order; refused
    naming both sides where two entries claim one parameter or more entries than parameters are given."""
    values = [chosen.dims[v] if kind == "dim" else v for kind, v in spec.inits]
    try:
        params = [p for p in inspect.signature(model_cls.__init__).parameters.values()][1:]
    except (TypeError, ValueError):
        return values
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return values
    norm = {p.name.replace("_", "").lower(): k for k, p in enumerate(params)}
    slots: dict[int, int] = {}  # constructor parameter -> init entry
    for i, (kind, v) in enumerate(spec.inits):
        k = norm.get(str(v).replace("_", "").lower()) if kind == "dim" else None
        if k is not None:
            if k in slots:
                raise TritonInputError(f"{spec.where}: inits[{slots[k]}] and inits[{i}] both name Model's parameter "
                                       f"{params[k].name!r}")
            slots[k] = i
    rest = iter(i for i in range(len(values)) if i not in slots.values())
    args: list[Any] = []
    for k, p in enumerate(params):
        i = slots[k] if k in slots else next(rest, None)
        if i is None:
            if p.default is p.empty and p.kind is not p.KEYWORD_ONLY:
                raise TritonInputError(f"{spec.where}: inits give no value for Model's parameter {p.name!r}")
            break
        args.append(values[i])
    left = list(rest)
    if left:
        raise TritonInputError(f"{spec.where}: inits[{left[0]}] has no parameter of Model.__init__ to go to "
                               f"({', '.join(p.name for p in params) or 'it takes none'})")
    return args


__all__ = ["SizeSet", "XeForgeSpec", "check", "flop_value", "init_args", "input_bytes", "is_xeforge", "select",
           "shapes"]
