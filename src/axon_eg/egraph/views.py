"""Looking inside a νGraph: e-class tables, members as readable terms, graphviz/SVG or text.

Used by the Jupyter notebook (``NuGraph._repr_html_``) and by ``axon-eg show``.
"""

from __future__ import annotations

import html
import shutil
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .convert import SerializedGraph, Term
from .kbest import k_best_all

if TYPE_CHECKING:
    from .nugraph import NuGraph


@dataclass(frozen=True)
class EClassInfo:
    id: str
    shape: tuple[int, ...]
    dtype: str
    size: int  # e-nodes in the class
    cost: int  # cheapest term's tree cost
    cheapest: str  # the cheapest term, readable


def _attr_text(v: Any) -> str:
    if isinstance(v, tuple):
        return "[" + " ".join(_attr_text(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def enode_text(g: SerializedGraph, nid: str, children: list[str] | None = None) -> str:
    """``matmul(T-3, T-7)`` (or with the given child texts), attributes shown as ``name=value``."""
    n = g.nodes[nid]
    if n["op"].startswith("root__"):
        return "root(" + ", ".join(children or g.tensor_children(nid)) + ")"
    op = g.op_name(nid)
    attrs = g.attrs(nid)
    if op == "input":
        return str(attrs["name"])
    if op == "constant":
        return repr(attrs["value"])
    parts = list(children if children is not None else g.tensor_children(nid))
    parts += [f"{k}={_attr_text(v)}" for k, v in attrs.items()]
    return f"{op}({', '.join(parts)})"


def term_text(g: SerializedGraph, term: Term) -> str:
    nid, kids = term
    return enode_text(g, nid, [term_text(g, k) for k in kids])


def eclasses(nu: NuGraph) -> list[EClassInfo]:
    """Every tensor e-class with its shape, dtype, size and cheapest member, largest first."""
    g = nu.serialized()
    best = k_best_all(g, 1)
    out = []
    for cls, members in g.classes.items():
        if cls not in g.shape:
            continue
        cost, term = best[cls][0] if best[cls] else (-1, None)
        text = term_text(g, term) if term is not None else "(no finite term)"
        out.append(EClassInfo(cls, g.shape[cls], g.dtype.get(cls, "?"), len(members), cost, text))
    out.sort(key=lambda e: (-e.size, e.id))
    return out


def members(nu: NuGraph, eclass: str) -> list[str]:
    """The e-nodes of one e-class, as ``op(child e-classes, attributes)`` with their costs."""
    g = nu.serialized()
    if eclass not in g.classes:
        raise KeyError(f"no e-class {eclass!r}; e-classes are listed by NuGraph views.eclasses()")
    return [f"{enode_text(g, nid)}   cost {g.cost[nid]}" for nid in g.classes[eclass]]


def neighbourhood(g: SerializedGraph, center: str | None, radius: int) -> set[str]:
    if center is None:
        return set(g.classes)
    keep = {center}
    parents = g.parents()
    frontier = {center}
    for _ in range(radius):
        nxt: set[str] = set()
        for cls in frontier:
            for nid in g.classes.get(cls, ()):
                nxt |= set(g.tensor_children(nid))
            nxt |= set(parents.get(cls, ()))
        frontier = nxt - keep
        keep |= nxt
    return keep


def to_dot(nu: NuGraph, center: str | None = None, radius: int = 2) -> str:
    """Graphviz source: one cluster per e-class, edges from e-nodes to child e-classes."""
    g = nu.serialized()
    keep = neighbourhood(g, center, radius)
    lines = ["digraph nugraph {", "  compound=true; rankdir=TB; node [shape=box, fontsize=10];"]
    anchor = {}
    for cls in sorted(keep):
        shape = g.shape.get(cls)
        label = f"{cls} {list(shape) if shape is not None else ''} {g.dtype.get(cls, '')}"
        lines.append(f'  subgraph "cluster_{cls}" {{ label="{html.escape(label)}"; style=rounded;')
        for nid in g.classes[cls]:
            op = g.nodes[nid]["op"]
            text = "root" if op.startswith("root__") else enode_text(g, nid, [])
            lines.append(f'    "{nid}" [label="{html.escape(text)}\\ncost {g.cost[nid]}"];')
            anchor.setdefault(cls, nid)
        lines.append("  }")
    for cls in sorted(keep):
        for nid in g.classes[cls]:
            for ch in g.tensor_children(nid):
                if ch in keep:
                    lines.append(f'  "{nid}" -> "{anchor[ch]}" [lhead="cluster_{ch}"];')
    lines.append("}")
    return "\n".join(lines)


def to_svg(nu: NuGraph, center: str | None = None, radius: int = 2) -> str | None:
    """SVG through the ``dot`` binary, or None when graphviz is not installed."""
    dot = shutil.which("dot")
    if dot is None:
        return None
    result = subprocess.run([dot, "-Tsvg"], input=to_dot(nu, center, radius), capture_output=True, text=True,
                            timeout=60)
    return result.stdout if result.returncode == 0 else None


def to_text(nu: NuGraph, center: str | None = None, radius: int = 2) -> str:
    """The e-graph (or a neighbourhood) as indented text: each e-class with its e-nodes."""
    g = nu.serialized()
    keep = neighbourhood(g, center, radius)
    lines = []
    for cls in sorted(keep):
        shape = g.shape.get(cls)
        lines.append(f"{cls}  {list(shape) if shape is not None else ''} {g.dtype.get(cls, '')}")
        for nid in g.classes[cls]:
            lines.append(f"    {enode_text(g, nid)}   cost {g.cost[nid]}")
    return "\n".join(lines)


def render(nu: NuGraph, center: str | None = None, radius: int = 2) -> str:
    """SVG when graphviz exists, else the text view."""
    return to_svg(nu, center, radius) or to_text(nu, center, radius)


def nugraph_html(nu: NuGraph, max_rows: int = 30) -> str:
    rows = eclasses(nu)
    head = (f"<b>νGraph {html.escape(nu.program.name)}</b>: {sum(r.size for r in rows)} e-nodes in "
            f"{len(rows)} e-classes, {len(nu.rules)} rules; last saturation: {html.escape(str(nu.report))}")
    table = ["<table><tr><th>e-class</th><th>shape</th><th>dtype</th><th>e-nodes</th><th>cost</th>"
             "<th>cheapest member</th></tr>"]
    for r in rows[:max_rows]:
        table.append(f"<tr><td>{r.id}</td><td>{list(r.shape)}</td><td>{r.dtype}</td><td>{r.size}</td>"
                     f"<td>{r.cost}</td><td><code>{html.escape(r.cheapest)}</code></td></tr>")
    table.append("</table>")
    if len(rows) > max_rows:
        table.append(f"<p>… {len(rows) - max_rows} more e-classes</p>")
    return head + "".join(table)
