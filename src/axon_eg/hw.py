"""Hardware descriptions: ``data/hw_costs/<target>.yaml`` checked against one schema, in base units.

Every number about a chip lives in those files (ARCHITECTURE.md, invariant 6); this module is the only
reader. Each leaf is a mapping ``{value, unit, source}`` (lists, booleans and strings: ``{value, source}``,
a list of ints may add ``unit: count``). ``SCHEMA`` says, per kind (``gpu``, ``trainium``), which
dotted keys exist, which are required, and what each holds (in ``axon_eg.hw_schema``). Loading converts
to base units:

- bytes (``B``; ``KB``/``MB``/``GB`` are decimal, ``KiB``/``MiB``/``GiB`` binary) -> ``int`` bytes,
- ``B/s``, ``FLOP/s``, ``Hz``, ``s`` (and ``GB/s``, ``TB/s``, ``TFLOP/s``, ``GHz``, ``us``, ``ns``) -> ``float``,
- ``count`` -> ``int``; lists -> ``list``; ``bool``/``str`` as written.

The ``tiles.*`` keys are the search ranges of the tile templates (``extract/templates``): a
``[lo, hi]`` pair of powers of two per tile parameter, or a cap on the elements of one program; the
``knobs.*`` keys hold the launch knobs (warp counts, pipeline stages, warp size, the default warp count).

Vendors often write binary sizes as "KB" (NVIDIA's "228 KB" of shared memory is 233472 B): such a
figure goes in as ``KiB``, with the vendor's wording in its source.

    >>> spec = load("h200")
    >>> spec.value("memory.shared.per_block")   # 232448 (bytes)
    >>> spec.source("memory.hbm.bandwidth")
"""

from __future__ import annotations

import difflib
import math
import os
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from axon_eg.errors import AxonError
from axon_eg.hw_schema import (
    ALL_KEYS,
    BASE_UNIT,
    INT_FAMILIES,
    LEAF_FIELDS,
    SCHEMA,
    TOP_LEVEL,
    UNITS,
    Field,
)


def data_dir(package: Path | None = None) -> Path:
    """Where the hardware descriptions are: ``axon_eg/data/hw_costs`` in an installed wheel (setup.py copies
    them there), else the source checkout's top-level ``data/hw_costs`` (a clone, an editable install).
    ``package``: the ``axon_eg`` package directory (default: this one's)."""
    package = package or Path(__file__).resolve().parent
    packaged = package / "data" / "hw_costs"
    return packaged if packaged.is_dir() else package.parents[1] / "data" / "hw_costs"


DATA_DIR = data_dir()

DEFAULT_HW = "h200"
"""The hardware description used when a caller names none: the pipeline, the CLI, the dynamo backend, the
Triton-to-Triton flow and the launch defaults of a tiling built by hand (``extract.templates.knobs``)."""


# --------------------------------------------------------------------------------------------- errors
class HardwareSpecError(AxonError, ValueError):
    """A hardware file that does not fit the schema, or a key a spec does not have.

    ``path`` is the file, ``key`` the first dotted key at fault (None for whole-file problems),
    ``problems`` every ``(key, message)`` found.
    """

    def __init__(self, path: Path | str | None, problems: list[tuple[str | None, str]]):
        self.path = Path(path) if path is not None else None
        self.problems = problems
        self.key = problems[0][0] if problems else None
        where = f"{self.path}: " if self.path is not None else ""
        lines = [f"{where}{key + ': ' if key else ''}{msg}" for key, msg in problems]
        super().__init__("\n".join(lines))

    def __str__(self) -> str:  # KeyError (see HardwareKeyError) would quote the message
        return str(self.args[0]) if self.args else ""


class HardwareKeyError(HardwareSpecError, KeyError):
    """``spec.value(key)`` for a key that the file does not give."""


# ----------------------------------------------------------------------------------------------- spec
@dataclass(frozen=True)
class HardwareSpec:
    """One target's hardware description, validated, in base units (see the module docstring)."""

    name: str
    kind: str
    vendor: str
    path: Path
    description: str = ""
    _values: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # lists kept as tuples
    _sources: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    def value(self, key: str) -> Any:
        """The value of a dotted leaf key in base units; raises ``HardwareKeyError`` naming it if absent."""
        if key not in self._values:
            raise self._missing(key)
        v = self._values[key]
        return list(v) if isinstance(v, tuple) else v

    def get(self, key: str, default: Any = None) -> Any:
        """Like ``value`` but ``default`` when the file omits the key; a key no schema knows still raises."""
        if key in self._values:
            return self.value(key)
        if key in ALL_KEYS:
            return default
        raise self._missing(key)

    def source(self, key: str) -> str:
        """Where the figure comes from (document, measurement, or ``derived: <formula>``)."""
        if key not in self._sources:
            raise self._missing(key)
        return self._sources[key]

    def keys(self) -> list[str]:
        """Every dotted leaf key the file gives, sorted."""
        return sorted(self._values)

    def flops_per_byte(self) -> int:
        """Flops the chip does in the time it moves one byte from off-chip memory: bf16 peak over memory
        bandwidth, measured figures where the file has them, rounded (the νGraph's extraction cost). A GPU:
        tensor-core peak over HBM bandwidth (the H200: 790 / 4.3 TFLOP/s per TB/s = 184); a NeuronCore: its
        Tensor-engine peak over its DMA bandwidth (what it moves between HBM and SBUF)."""
        if self.kind == "trainium":
            peak = self.value("compute.engines.tensor.peak.bf16")
            bandwidth = self.value("compute.dma.engines") * self.value("compute.dma.bandwidth_per_engine")
        else:
            peak = self.get("compute.measured_peak.bf16") or self.value("compute.peak.bf16")
            bandwidth = self.get("memory.hbm.measured_bandwidth") or self.value("memory.hbm.bandwidth")
        return max(1, round(peak / bandwidth))

    def _missing(self, key: str) -> HardwareKeyError:
        fields = SCHEMA[self.kind]
        if key in fields:
            msg = f"not given for {self.name} (optional for kind {self.kind!r}); use spec.get(key, default)"
        elif key in ALL_KEYS:
            msg = f"is not a key of kind {self.kind!r} (target {self.name})"
        else:
            msg = f"unknown hardware key{_did_you_mean(key, fields)}"
        return HardwareKeyError(self.path, [(key, msg)])


# ------------------------------------------------------------------------------------------- loading
def targets() -> list[str]:
    """Names of the bundled hardware files (``load(name)`` takes each)."""
    return sorted(p.stem for p in DATA_DIR.glob("*.yaml"))


def load(target: str | Path) -> HardwareSpec:
    """Load a bundled target by name (``"h200"``) or a YAML file by path; cached per file version."""
    path = _resolve(target)
    try:
        st = path.stat()
    except OSError as e:
        raise HardwareSpecError(path, [(None, f"cannot read the file ({e.strerror})")]) from None
    return _load_cached(path, st.st_mtime_ns, st.st_size)


def _resolve(target: str | Path) -> Path:
    if isinstance(target, Path) or os.sep in target or "/" in target or target.endswith((".yaml", ".yml")):
        return Path(target).resolve()
    path = DATA_DIR / f"{target}.yaml"
    if not path.is_file():
        hint = difflib.get_close_matches(target, targets(), n=1)
        extra = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise HardwareSpecError(path, [(None, f"unknown target {target!r}{extra}; bundled targets: "
                                              f"{', '.join(targets())}; or pass a path to a YAML file")])
    return path


@lru_cache(maxsize=64)
def _load_cached(path: Path, mtime_ns: int, size: int) -> HardwareSpec:
    del mtime_ns, size  # cache key only: an edited file is read again
    return parse(path.read_text(encoding="utf-8"), path)


def parse(text: str, path: Path | str = "<string>") -> HardwareSpec:
    """Validate YAML text (``path`` names it in errors) and build the spec."""
    path = Path(path)
    try:
        doc = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = (getattr(e, "problem", None) or str(e)).strip()
        raise HardwareSpecError(path, [(None, f"malformed YAML{where}: {what}")]) from None
    if not isinstance(doc, dict):
        raise HardwareSpecError(path, [(None, f"expected a mapping at top level, got {_show(doc)}")])
    return _Checker(path).check(doc)


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key written twice in one mapping (PyYAML keeps the last silently)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"key {key!r} written twice", key_node.start_mark)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class _Checker:
    """Walks one document against the schema of its kind, collecting every problem."""

    def __init__(self, path: Path):
        self.path = path
        self.problems: list[tuple[str | None, str]] = []
        self.values: dict[str, Any] = {}
        self.sources: dict[str, str] = {}

    def fail(self, key: str | None, msg: str) -> None:
        self.problems.append((key, msg))

    def check(self, doc: dict) -> HardwareSpec:
        kind = doc.get("kind")
        for key in ("name", "kind", "vendor"):
            if key not in doc:
                self.fail(key, "missing required key")
            elif not isinstance(doc[key], str) or not doc[key]:
                self.fail(key, f"expected a non-empty string, got {_show(doc[key])}")
        if "description" in doc and not isinstance(doc["description"], str):
            self.fail("description", f"expected a string, got {_show(doc['description'])}")
        if isinstance(doc.get("name"), str) and doc["name"] and doc["name"] != self.path.stem:
            self.fail("name", f"{doc['name']!r} differs from the file name {self.path.stem!r}; rename one")
        if isinstance(kind, str) and kind and kind not in SCHEMA:
            self.fail("kind", f"unknown kind {kind!r}; expected one of {', '.join(SCHEMA)}")
        if not isinstance(kind, str) or kind not in SCHEMA:
            raise HardwareSpecError(self.path, self.problems)
        fields = SCHEMA[kind]
        self.walk({k: v for k, v in doc.items() if k not in TOP_LEVEL}, "", fields)
        for key, f in fields.items():
            reported = any(p and (key == p or key.startswith(f"{p}.")) for p, _ in self.problems)
            if f.required and key not in self.values and not reported:
                self.fail(key, f"missing required key (a {_describe(f)})")
        if not self.problems:
            self.cross_check(kind)
        if self.problems:
            raise HardwareSpecError(self.path, self.problems)
        return HardwareSpec(name=doc["name"], kind=kind, vendor=doc["vendor"], path=self.path,
                            description=doc.get("description", ""), _values=self.values, _sources=self.sources)

    def walk(self, node: dict, prefix: str, fields: dict[str, Field]) -> None:
        for raw_key, sub in node.items():
            key = f"{prefix}{raw_key}"
            if key in fields:
                self.leaf(key, sub, fields[key])
            elif any(k.startswith(f"{key}.") for k in fields):
                if isinstance(sub, dict):
                    self.walk(sub, f"{key}.", fields)
                else:
                    self.fail(key, f"expected a section (mapping), got {_show(sub)}")
            else:
                siblings = {f"{prefix}{k[len(prefix):].split('.')[0]}" for k in fields if k.startswith(prefix)}
                top = TOP_LEVEL if not prefix else set()
                self.fail(key, f"unknown key{_did_you_mean(key, siblings | top | set(fields))}")

    def leaf(self, key: str, node: Any, f: Field) -> None:
        if not isinstance(node, dict):
            self.fail(key, f"expected a mapping {{value, {'unit, ' if f.type == 'quantity' else ''}source}}, "
                           f"got {_show(node)}")
            return
        for extra in set(node) - LEAF_FIELDS:
            self.fail(f"{key}.{extra}", "unknown key; a leaf holds only value, unit and source")
        source = node.get("source")
        if not isinstance(source, str) or not source.strip():
            self.fail(key, f"needs a source (document, measurement or 'derived: <formula>'), got {_show(source)}")
        if "value" not in node or node["value"] is None:
            self.fail(key, f"missing value (a {_describe(f)})")
            return
        value = self.convert(key, node["value"], node.get("unit"), "unit" in node, f)
        if value is not None:
            self.values[key] = value
            self.sources[key] = source if isinstance(source, str) else ""

    def convert(self, key: str, value: Any, unit: Any, has_unit: bool, f: Field) -> Any:
        if f.type == "quantity":
            return self.quantity(key, value, unit, f.family or "count")
        if f.type == "list[int]":
            if has_unit and unit != "count":
                return self.fail(key, f"wrong unit {unit!r}: a list of ints takes no unit or 'count'")
            if not _is_list_of(value, _is_int) or not value:
                return self.fail(key, f"wrong type: expected a non-empty list of integers, got {_show(value)}")
            if any(v <= 0 for v in value):
                return self.fail(key, f"must be positive, got {value}")
            if f.range and (len(value) != 2 or value[0] > value[1] or any(v & (v - 1) for v in value)):
                return self.fail(key, f"expected a tile range [lo, hi]: two powers of two, lo <= hi, got {value}")
            return tuple(value)
        if has_unit:
            return self.fail(key, f"wrong unit {unit!r}: a {f.type} takes no unit")
        if f.type == "bool":
            if not isinstance(value, bool):
                return self.fail(key, f"wrong type: expected true or false, got {_show(value)}")
            return value
        if f.type == "str":
            if not isinstance(value, str) or not value:
                return self.fail(key, f"wrong type: expected a non-empty string, got {_show(value)}")
            if f.choices and value not in f.choices:
                return self.fail(key, f"{value!r} is not one of {', '.join(map(repr, f.choices))}")
            return value
        if f.type == "list[str]":
            if not _is_list_of(value, lambda v: isinstance(v, str) and bool(v)) or not value:
                return self.fail(key, f"wrong type: expected a non-empty list of strings (quote numbers: '128'), "
                                      f"got {_show(value)}")
            return tuple(value)
        raise AssertionError(f"schema field type {f.type!r}")

    def quantity(self, key: str, value: Any, unit: Any, family: str) -> Any:
        allowed = [u for u, (fam, _) in UNITS.items() if fam == family]
        if unit is None:
            return self.fail(key, f"missing unit; expected one of {', '.join(allowed)}")
        if unit not in UNITS or UNITS[unit][0] != family:
            got = f"a {UNITS[unit][0]} unit" if unit in UNITS else "not a known unit"
            return self.fail(key, f"wrong unit {unit!r} ({got}); expected a {family} unit: {', '.join(allowed)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            hint = " (PyYAML reads 1e9 as a string: write 1.0e+9, or use a larger unit)" if isinstance(value, str) \
                else ""
            return self.fail(key, f"wrong type: expected a number, got {_show(value)}{hint}")
        if not math.isfinite(value):
            return self.fail(key, f"must be a finite number, got {value}")
        if value <= 0:
            return self.fail(key, f"must be positive, got {value} {unit}")
        if family == "count" and not isinstance(value, int):
            return self.fail(key, f"wrong type: a count is a whole number, got {value!r}")
        # exact decimal arithmetic: 2.9 TB/s is 2.9e12 B/s, 1.5 KiB is 1536 B, 5 us is 5e-06 s
        base = (Fraction(repr(value)) if isinstance(value, float) else Fraction(value)) * UNITS[unit][1]
        if family in INT_FAMILIES:
            if base.denominator != 1:
                return self.fail(key, f"{value} {unit} is not a whole number of {BASE_UNIT[family]} "
                                      f"({float(base)})")
            return int(base)
        return float(base)

    def cross_check(self, kind: str) -> None:
        """Relations between figures that a copy-paste slip would break."""
        v = self.values
        le = [("memory.shared.per_block", "memory.shared.per_sm"),
              ("knobs.num_stages.min", "knobs.num_stages.max"),
              ("memory.hbm.measured_bandwidth", "memory.hbm.bandwidth"),
              ("compute.measured_peak.bf16", "compute.peak.bf16"),
              ("limits.partition_max", "memory.sbuf.partitions"),
              ("limits.matmul.contraction_max", "limits.partition_max"),
              ("limits.transpose.vector_engine_max", "limits.transpose.tensor_engine_max")]
        for small, big in le:
            if small in v and big in v and v[small] > v[big]:
                self.fail(small, f"{v[small]} exceeds {big} = {v[big]}")
        if "knobs.default_num_warps" in v and "knobs.num_warps" in v \
                and v["knobs.default_num_warps"] not in v["knobs.num_warps"]:
            self.fail("knobs.default_num_warps", f"{v['knobs.default_num_warps']} is not one of knobs.num_warps "
                                                 f"{list(v['knobs.num_warps'])}")
        if kind == "trainium":
            banks, bank, per = v["memory.psum.banks"], v["memory.psum.bank"], v["memory.psum.per_partition"]
            if banks * bank != per:
                self.fail("memory.psum.per_partition", f"{per} B is not memory.psum.banks x memory.psum.bank "
                                                       f"= {banks} x {bank} B")
            if v["limits.matmul.moving_free_max"] * 4 > bank:  # fp32 accumulators of one matmul fill one bank
                self.fail("limits.matmul.moving_free_max", f"{v['limits.matmul.moving_free_max']} fp32 values "
                                                           f"overflow one PSUM bank of {bank} B")


# ---------------------------------------------------------------------------------------------- helpers
def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_list_of(value: Any, pred: Any) -> bool:
    return isinstance(value, list) and all(pred(v) for v in value)


def _show(value: Any) -> str:
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{type(value).__name__} {text}" if value is not None else "nothing"


def _describe(f: Field) -> str:
    if f.type == "quantity" and f.family == "count":
        return "whole number, unit: count"
    if f.type == "quantity":
        return f"number with a {f.family} unit: {', '.join(u for u, (fam, _) in UNITS.items() if fam == f.family)}"
    if f.range:
        return "tile range [lo, hi] of powers of two, unit: count"
    return f.type + (f" in {{{', '.join(f.choices)}}}" if f.choices else "")


def _did_you_mean(key: str, known: Any) -> str:
    hint = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    return f"; did you mean {hint[0]!r}?" if hint else ""
