"""Program <-> egglog terms. The only module that knows how a Program is spelled in egglog.

``to_egglog`` writes a bound, composite-free Program as egglog ``let`` commands (one per node, so
shared subterms stay shared) plus the dim bindings. ``SerializedGraph`` reads egglog's JSON
serialization back, and ``term_to_program`` rebuilds a Program from an extracted term through the
Builder, so every shape and dtype is re-derived by the registry's own rules.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from axon_eg.errors import ProgramError
from axon_eg.ir import dims as D
from axon_eg.ir.builder import Builder
from axon_eg.ir.dtypes import DType
from axon_eg.ir.program import Program

from . import schema as S

# ------------------------------------------------------------------------------------------------
# Program -> egglog text
# ------------------------------------------------------------------------------------------------


def dim_to_egg(d: D.Dim) -> str:
    if isinstance(d, int):
        return f"(DLit {d})"
    total = None
    for mono, coeff in d.terms:
        term = f"(DLit {coeff})" if coeff != 1 or not mono else None
        for atom in mono:
            factor = f'(DVar "{atom}")' if isinstance(atom, str) else \
                f"(DDiv {dim_to_egg(atom.num)} {dim_to_egg(atom.den)})"
            term = factor if term is None else f"(DMul {term} {factor})"
        total = term if total is None else f"(DAdd {total} {term})"
    assert total is not None
    return total


def _float(v: float) -> str:
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    text = repr(float(v))
    return text if any(c in text for c in ".en") else text + ".0"


def _string(s: str) -> str:
    if '"' in s or "\\" in s:
        raise ProgramError(f"names used in the νGraph cannot contain quotes or backslashes: {s!r}")
    return f'"{s}"'


def attr_to_egg(kind: str, value: Any) -> str:
    kind = kind.removeprefix("optional_")
    if value is None:
        raise ProgramError(f"attribute of kind {kind} is None: canonicalize the op before it enters the νGraph")
    if kind == "int":
        return str(int(value))
    if kind == "float":
        return _float(value)
    if kind == "bool":
        return "true" if value else "false"
    if kind == "str":
        return _string(value)
    if kind == "dtype":
        return _string(value.name if isinstance(value, DType) else str(value))
    if kind == "ints":
        return S._vec([str(int(x)) for x in value])
    if kind == "dim":
        return dim_to_egg(value)
    if kind == "dims":
        return S._vec([dim_to_egg(x) for x in value])
    raise ProgramError(f"attribute kind {kind} cannot enter the νGraph")


def node_to_egg(program: Program, i: int, names: list[str]) -> str:
    node = program.nodes[i]
    c = S.constructor_for(node.op, len(node.inputs))
    args = [names[j] for j in node.inputs]
    args += [attr_to_egg(a.kind, node.attrs[a.name]) for a in c.op.attrs]
    return f"({c.name} {' '.join(args)})" if args else f"({c.name})"


def check_enterable(program: Program) -> None:
    unbound = sorted(program.free_dims - set(program.bindings))
    if unbound:
        raise ProgramError(f"{program.name}: bind dims {unbound} before building a νGraph (program.bind(...))")
    for n in program.nodes:
        if len(n.shape) > S.MAX_RANK:
            raise ProgramError(f"{program.name}: {n.op} has rank {len(n.shape)} > {S.MAX_RANK}")


def _literal_sizes(program: Program) -> set[int]:
    found: set[int] = set()

    def visit(v: Any) -> None:
        if isinstance(v, bool):
            return
        if isinstance(v, int):
            found.add(abs(v))
        elif isinstance(v, D.Sym):
            for mono, coeff in v.terms:
                found.add(abs(coeff))
                for atom in mono:
                    if isinstance(atom, D.FloorDiv):
                        visit(atom.num)
                        visit(atom.den)
        elif isinstance(v, tuple):
            for x in v:
                visit(x)

    for n in program.nodes:
        visit(n.shape)
        for value in n.attrs.values():
            visit(value)
    return found


def _primes(lo: int, hi: int) -> list[int]:
    return [p for p in range(lo, hi) if p > 1 and all(p % q for q in range(2, int(p**0.5) + 1))]


_GENERIC = _primes(101, 1000)  # products of six stay below 2**63


def generic_sizes(program: Program) -> dict[str, int]:
    """A distinct prime per named dim, none of them a literal size or coefficient of the program:
    the sizes of ``gshape`` (see ``schema``), equal only where the symbolic dims are."""
    taken = _literal_sizes(program)
    pool = [p for p in _GENERIC if p not in taken]
    names = sorted(program.free_dims | set(program.bindings))
    if len(names) > len(pool):
        pool += [p for p in _primes(1000, 1000 + 20 * len(names)) if p not in taken]
    return dict(zip(names, pool))


def to_egglog(program: Program, prefix: str = "node_") -> tuple[str, list[str], str]:
    """(commands, one let-name per node, the root's let-name) for an expanded, bound Program."""
    check_enterable(program)
    lines = [S.root_declaration(len(program.outputs))] if len(program.outputs) > S.MAX_VARIADIC else []
    lines += [f'(set (dval (DVar "{k}")) {v})' for k, v in sorted(program.bindings.items())]
    lines += [f'(set (gval (DVar "{k}")) {v})' for k, v in sorted(generic_sizes(program).items())]
    names = [f"${prefix}{i}" for i in range(len(program.nodes))]
    for i in range(len(program.nodes)):
        lines.append(f"(let {names[i]} {node_to_egg(program, i, names)})")
    root = f"${prefix}root"  # globals must not clash with rule variables (n0, s0, ...)
    outs = " ".join(names[o] for o in program.outputs)
    lines.append(f"(let {root} (root__{len(program.outputs)} {outs}))")
    return "\n".join(lines), names, root


# ------------------------------------------------------------------------------------------------
# egglog JSON serialization -> Python
# ------------------------------------------------------------------------------------------------
@dataclass
class SerializedGraph:
    """egglog's serialized e-graph, indexed: nodes by id, tensor e-classes with their e-nodes,
    analyses (shape, dtype) per e-class and the cost of every tensor e-node."""

    nodes: dict[str, dict[str, Any]]
    classes: dict[str, list[str]] = field(default_factory=dict)  # T and Root e-classes -> e-node ids
    shape: dict[str, tuple[int, ...]] = field(default_factory=dict)
    dtype: dict[str, str] = field(default_factory=dict)
    cost: dict[str, int] = field(default_factory=dict)  # e-node id -> cost
    made_by: dict[str, set[str]] = field(default_factory=dict)  # e-node id -> rules that created it
    root: str | None = None

    @staticmethod
    def from_json(text: str, root_class: str | None = None) -> SerializedGraph:
        raw = json.loads(text)["nodes"]
        g = SerializedGraph(raw)
        ctors = S.constructor_by_name()
        cost_index: dict[tuple[str, tuple[str, ...]], int] = {}
        made_index: dict[tuple[str, tuple[str, ...]], set[str]] = {}
        for nid, n in raw.items():
            op = n["op"]
            if op in ctors or op.startswith("root__"):
                g.classes.setdefault(n["eclass"], []).append(nid)
            elif op == "shape" and n["children"]:
                g.shape[g.eclass(n["children"][0])] = g.ints(g.value_node(n["eclass"]))
            elif op == "dtype" and n["children"]:
                g.dtype[g.eclass(n["children"][0])] = g.string(g.value_node(n["eclass"]))
            elif op.startswith("cost_T_"):
                key = (op[len("cost_"):], tuple(g.eclass(ch) for ch in n["children"]))
                cost_index[key] = int(g.nodes[g.value_node(n["eclass"])]["op"])
            elif op.startswith("made_T_"):
                key = (op[len("made_"):], tuple(g.eclass(ch) for ch in n["children"][:-1]))
                made_index.setdefault(key, set()).add(g.string(n["children"][-1]))
        for cls, members in g.classes.items():
            for nid in members:
                n = raw[nid]
                if n["op"].startswith("root__"):
                    g.cost[nid] = 0
                    g.root = g.root or (cls if root_class is None else root_class)
                    continue
                key = (n["op"], tuple(g.eclass(ch) for ch in n["children"]))
                if key not in cost_index:
                    raise ProgramError(f"νGraph: e-node {n['op']} has no cost (its analyses did not run)")
                g.cost[nid] = cost_index[key]
                if key in made_index:
                    g.made_by[nid] = made_index[key]
            members.sort()
        if root_class is not None:
            g.root = root_class
        return g

    # primitive values ------------------------------------------------------------------------
    _primitive: dict[str, str] | None = None

    def value_node(self, eclass: str) -> str:
        """The node that spells a primitive e-class (an i64, a vector, a string)."""
        if self._primitive is None:
            self._primitive = {n["eclass"]: nid for nid, n in self.nodes.items() if nid.startswith("primitive-")}
        return self._primitive[eclass]

    def eclass(self, nid: str) -> str:
        return self.nodes[nid]["eclass"]

    def ints(self, nid: str) -> tuple[int, ...]:
        return tuple(int(self.nodes[c]["op"]) for c in self.nodes[nid]["children"])

    def string(self, nid: str) -> str:
        return json.loads(self.nodes[nid]["op"])

    def decode(self, sort: str, nid: str) -> Any:
        op = self.nodes[nid]["op"]
        if sort == "i64":
            return int(op)
        if sort == "f64":
            return float(op)
        if sort == "bool":
            return op == "true"
        if sort == "String":
            return self.string(nid)
        if sort == "IVec":
            return self.ints(nid)
        if sort == "Dim":
            return self.dim(nid)
        if sort == "DVec":
            return tuple(self.dim(c) for c in self.nodes[nid]["children"])
        raise ProgramError(f"cannot decode egglog sort {sort}")

    def dim(self, nid: str) -> D.Dim:
        n = self.nodes[nid]
        kids = n["children"]
        if n["op"] == "DLit":
            return int(self.nodes[kids[0]]["op"])
        if n["op"] == "DVar":
            return D.sym(self.string(kids[0]))
        a, b = (self.dim(k) for k in kids)
        return {"DAdd": D.add, "DMul": D.mul, "DDiv": D.floordiv}[n["op"]](a, b)

    # tensor e-graph view -----------------------------------------------------------------------
    def tensor_children(self, nid: str) -> list[str]:
        """The e-classes of a tensor e-node's tensor inputs, in order."""
        n = self.nodes[nid]
        if n["op"].startswith("root__"):
            return [self.eclass(c) for c in n["children"]]
        c = S.constructor_by_name()[n["op"]]
        return [self.eclass(ch) for ch in n["children"][: c.n_inputs]]

    def attrs(self, nid: str) -> dict[str, Any]:
        n = self.nodes[nid]
        c = S.constructor_by_name()[n["op"]]
        sorts = c.sorts()[c.n_inputs:]
        kids = n["children"][c.n_inputs:]
        return {a.name: self.decode(sort, k) for a, sort, k in zip(c.op.attrs, sorts, kids)}

    def op_name(self, nid: str) -> str:
        return S.constructor_by_name()[self.nodes[nid]["op"]].op.name

    def parents(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = defaultdict(list)
        for cls, members in self.classes.items():
            for nid in members:
                for ch in set(self.tensor_children(nid)):
                    out[ch].append(cls)
        return out


# A term is (e-node id, (child terms...)): a tree choosing one e-node per e-class occurrence.
Term = tuple[str, tuple[Any, ...]]


def term_to_program(g: SerializedGraph, term: Term, original: Program) -> Program:
    """Rebuild a Program from a root term; inputs keep the original's order, names and roles."""
    b = Builder(original.name)
    values: dict[Any, Any] = {}
    for spec in original.inputs:  # every input, used or not, in the original order
        values[("input", spec.name)] = b.input(spec.name, spec.shape, spec.dtype)

    def build(t: Term) -> Any:
        nid, kids = t
        if t in values:
            return values[t]
        op = g.op_name(nid)
        attrs = g.attrs(nid)
        if op == "input":
            v = values[("input", attrs["name"])]
        elif op == "constant":
            v = b.constant(attrs["value"], attrs["dtype"])
        else:
            v = b.emit(op, *[build(k) for k in kids], **attrs)
        values[t] = v
        return v

    root_id, outs = term
    outputs = [build(o) for o in outs]
    return b.build(outputs, dims=original.bindings, roles=dict(original.roles))
