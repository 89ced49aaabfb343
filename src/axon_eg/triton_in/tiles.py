"""Stages that change how a kernel's work is cut into programs: tile constexprs, the ``GROUP_SIZE_M`` swizzle
and the persistent loop. Each reads the kernel (libcst) for what its constexprs and program ids mean, and the
wrapper's launches at the harness's sizes (:func:`axon_eg.triton_in.launches.trace`) for the problem sizes.

- :class:`TileSizes`: a constexpr the launches pass as an integer literal is a tile size the stage may
  change when the kernel uses it in one of two roles:
  - **a program's extent along a grid axis**: ``tl.program_id(a) * C`` (or a name assigned
    ``tl.program_id(a)``, times ``C``), and each launch's grid element ``a`` is ``triton.cdiv(E, L)`` with
    ``L`` the launch's value of ``C``: the grid follows the new value (``launches.launch_changes_allowed``);
  - **a loop's step**: ``for k in range(lo, hi, C)`` (or ``tl.range``).
  The space is the tile template's for the kernel's kind (:mod:`axon_eg.extract.templates`, numbers from
  ``data/hw_costs``): a kernel with ``tl.dot``, axis-0, axis-1 and loop tiles is a matmul
  (``MatmulTile``: BLOCK_M, BLOCK_N, BLOCK_K, warps, stages); one with a single grid-axis tile is
  element-wise (``ElementwiseTile``); one with a single loop tile streams rows (``RowsTile``'s chunk). The
  template's constraints prune; its tie-break ranks; the first ``TILE_POINTS`` are candidates.
- :class:`Swizzle`: a matmul kernel on a 2-D grid visits its output tiles in groups of ``GROUP_SIZE_M``
  tile rows (the Triton matmul tutorial's order, so the tiles of a group share operand panels in L2). The
  grid stays: the launch order's linear id is remapped inside the kernel, ``tl.program_id(0/1)`` replaced
  by the swizzled ids (a permutation of the tiles).
- :class:`Persistent`: a matmul kernel with more tiles than the GPU has SMs runs as ``P`` programs
  (``compute.units`` of the hardware file, and twice that), each looping over tiles ``pid, pid + P, ...``;
  the input's grid reaches the kernel as ``AXON_GRID_<i>`` arguments and ``tl.program_id`` /
  ``tl.num_programs`` inside become the loop's tile ids and those sizes. A kernel that returns early is
  not rewritten (a ``return`` would end the loop).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from axon_eg.backends.triton.templates import ElementwiseTile, MatmulTile, RowsTile
from axon_eg.extract.templates.base import GroupFacts, TilingSpace, knobs
from axon_eg.hw import HardwareSpec

from .launches import GRID_KEYWORD, Code, SetLaunchKeywords, code, grid_variables, sites
from .source import TritonFile, _dotted, load

TILE_POINTS = 8
"""Tile-size candidates per kernel: the template's first by its tie-break (each is one measured file)."""
SWIZZLE_GROUPS = (4, 8, 16)
"""``GROUP_SIZE_M`` values the swizzle stage offers (the Triton matmul tutorial uses 8)."""


def _program_id_axis(node: cst.BaseExpression, names: dict[str, int]) -> int | None:
    """The axis of ``tl.program_id(a)`` (or of a name assigned one), else None."""
    if isinstance(node, cst.Name):
        return names.get(node.value)
    if isinstance(node, cst.Call) and _dotted(node.func) in ("tl.program_id", "triton.language.program_id") and node.args:
        value = node.args[0].value
        return int(value.value) if isinstance(value, cst.Integer) else None
    return None


@dataclass
class KernelFacts:
    """What a kernel's body says about its tiles and program ids."""

    name: str
    axis_of: dict[str, int] = field(default_factory=dict)  # constexpr -> grid axis it is a program's extent on
    loop_extent: dict[str, str | None] = field(default_factory=dict)  # constexpr -> the loop bound's parameter
    axes: set[int] = field(default_factory=set)  # program-id axes the kernel reads
    dot: bool = False
    returns: bool = False


def kernel_facts(tf: TritonFile, kernel: str) -> KernelFacts:
    facts = KernelFacts(kernel)
    constexprs = set(tf.kernels[kernel].constexprs)
    node = next(n for n in tf.module.body if isinstance(n, cst.FunctionDef) and n.name.value == kernel)
    pids: dict[str, int] = {}

    class Reader(cst.CSTVisitor):
        def visit_Assign(self, n: cst.Assign) -> None:
            if len(n.targets) == 1 and isinstance(n.targets[0].target, cst.Name):
                axis = _program_id_axis(n.value, {})
                if axis is not None:
                    pids[n.targets[0].target.value] = axis

        def visit_Call(self, n: cst.Call) -> None:
            name = _dotted(n.func)
            if name in ("tl.dot", "triton.language.dot"):
                facts.dot = True
            axis = _program_id_axis(n, {})
            if axis is not None:
                facts.axes.add(axis)

        def visit_BinaryOperation(self, n: cst.BinaryOperation) -> None:
            if not isinstance(n.operator, cst.Multiply):
                return
            for a, b in ((n.left, n.right), (n.right, n.left)):
                axis = _program_id_axis(a, pids)
                if axis is not None and isinstance(b, cst.Name) and b.value in constexprs:
                    facts.axis_of.setdefault(b.value, axis)

        def visit_For(self, n: cst.For) -> None:
            it = n.iter
            if isinstance(it, cst.Call) and _dotted(it.func) in ("range", "tl.range", "triton.language.range") \
                    and len(it.args) >= 3 and isinstance(it.args[2].value, cst.Name) and it.args[2].value.value in constexprs:
                hi = it.args[1].value
                facts.loop_extent[it.args[2].value.value] = hi.value if isinstance(hi, cst.Name) else None

        def visit_Return(self, n: cst.Return) -> None:
            facts.returns = True

    node.body.visit(Reader())
    return facts


def _launched(tf: TritonFile) -> list[str]:
    launched = {launch.kernel for launch in tf.launches}
    return [k.name for k in tf.kernels.values() if k.name in launched and not k.autotuned]


def _traced(tf: TritonFile, kernel: str):
    return next((t for t in (tf.trace or []) if t.kernel == kernel), None)


def _cdiv_divisor(node: cst.BaseExpression) -> int | None:
    if isinstance(node, cst.Call) and _dotted(node.func) in ("triton.cdiv", "cdiv") and len(node.args) == 2:
        d = node.args[1].value
        return int(d.value, 0) if isinstance(d, cst.Integer) else None
    return None


def tile_constexprs(tf: TritonFile, kernel: str) -> dict[str, tuple[str, int, int | None]]:
    """The kernel's tile constexprs the stage may change: name -> (role "axis" or "loop", the launches'
    value, the grid axis of an "axis" tile)."""
    facts = kernel_facts(tf, kernel)
    launches = [s for s in sites(tf) if s.kernel == kernel]
    out: dict[str, tuple[str, int, int | None]] = {}
    for c in tf.kernels[kernel].constexprs:
        values = {code(s.keywords[c]) if c in s.keywords else None for s in launches}
        if len(values) != 1 or not (v := next(iter(values))) or not v.isdigit():
            continue
        value = int(v)
        if c in facts.axis_of:
            axis = facts.axis_of[c]
            if all((el := s.elements()) is not None and axis < len(el) and _cdiv_divisor(el[axis]) == value
                   for s in launches):
                out[c] = ("axis", value, axis)
        elif c in facts.loop_extent:
            out[c] = ("loop", value, None)
    return out


class TileSizes:
    """The tile constexprs of each kernel over its template's space (see the module docstring)."""

    name = "tile_sizes"
    after: tuple[str, ...] = ("launch_knobs",)

    def detect(self, tf: TritonFile) -> list[str]:
        return [k for k in _launched(tf) if self._template(tf, k) is not None]

    def _template(self, tf: TritonFile, kernel: str):
        """(template, {template parameter: constexpr}) of a kernel whose tiles a template covers, else None."""
        tiles = tile_constexprs(tf, kernel)
        facts = kernel_facts(tf, kernel)
        by_axis = {axis: c for c, (role, _, axis) in tiles.items() if role == "axis"}
        loops = [c for c, (role, _, _) in tiles.items() if role == "loop"]
        if facts.dot:
            if 0 in by_axis and 1 in by_axis and len(loops) == 1:
                return MatmulTile, {"BLOCK_M": by_axis[0], "BLOCK_N": by_axis[1], "BLOCK_K": loops[0]}
            return None
        if len(tiles) == 1 and by_axis:
            return ElementwiseTile, {"BLOCK": next(iter(by_axis.values()))}
        if len(tiles) == 1 and loops:
            return RowsTile, {"BLOCK_N": loops[0]}
        return None

    def space(self, tf: TritonFile, hw: HardwareSpec) -> list[dict[str, Any]]:
        if hw.kind != "gpu":
            return []
        points: list[dict[str, Any]] = []
        for kernel in self.detect(tf):
            template, names = self._template(tf, kernel)
            tiles = tile_constexprs(tf, kernel)
            traced = _traced(tf, kernel)
            item = max((traced.tensor_items.values() if traced else ()), default=4)
            dims = self._dims(template.kind, tiles, names, facts=kernel_facts(tf, kernel), traced=traced)
            params, constraints = template.params(GroupFacts(template.kind, dims, item, 3), hw)
            fixed = {"ROWS_PER_PROGRAM": 1, "SPLIT": 1, "SPLIT_K": 1}
            params = [(n, tuple(v for v in vals if n not in fixed or v == fixed[n]) or vals) for n, vals in params]
            space = TilingSpace(0, template.kind, tuple(dims.items()), tuple(params), tuple(constraints), template,
                                knobs(hw))
            tilings, _ = space.tilings()
            ranked = sorted(tilings, key=lambda t: t.typed.tie_break(knobs(hw).warp_size))
            given = {c: v for c, (_, v, _) in tiles.items()}
            launch_knobs = [s.keywords for s in sites(tf) if s.kernel == kernel]
            taken = 0
            for t in ranked:
                values = {names[n]: int(t[n]) for n in names}
                extra = {k: t[k] for k in ("num_warps", "num_stages", "grf_mode") if t.get(k) is not None}
                if values == given and all(code(kw[k]) == str(v) for kw in launch_knobs for k, v in extra.items() if k in kw):
                    continue  # what the input launches
                points.append({"kernel": kernel, "tiles": values, **extra})
                taken += 1
                if taken == TILE_POINTS:
                    break
        return points

    @staticmethod
    def _dims(kind: str, tiles: dict[str, tuple[str, int, int | None]], names: dict[str, str], facts: KernelFacts,
              traced) -> dict[str, int]:
        """The template's problem sizes: a grid axis's extent is its programs times the input's tile (an upper
        bound, exact up to one tile); a loop's is its bound's argument. Unknown (no trace): 4096."""
        def extent(c: str) -> int:
            role, value, axis = tiles[c]
            if traced is None:
                return 4096
            if role == "axis":
                return traced.grid[axis] * value if axis < len(traced.grid) else 4096
            bound = facts.loop_extent.get(c)
            return traced.ints.get(bound, 4096) if bound else 4096

        if kind == "matmul":
            return {"M": extent(names["BLOCK_M"]), "N": extent(names["BLOCK_N"]), "K": extent(names["BLOCK_K"]),
                    "BATCH": 1}
        if kind == "elementwise":
            return {"ROWS": 1, "COLS": extent(names["BLOCK"])}
        programs = traced.programs if traced is not None else 1
        return {"ROWS": programs, "COLS": extent(names["BLOCK_N"])}

    def apply(self, tf: TritonFile, params: dict[str, Any]) -> str:
        kernel = params["kernel"]
        tiles = tile_constexprs(tf, kernel)
        literals = {axis: (value, params["tiles"][c]) for c, (role, value, axis) in tiles.items()
                    if role == "axis" and c in params["tiles"]}
        values = dict(params["tiles"]) | {k: params[k] for k in ("num_warps", "num_stages", "grf_mode") if k in params}
        return tf.module.visit(SetLaunchKeywords(kernel, values, literals=literals,
                                                 grid_variables=grid_variables(tf))).code


class _ProgramIds(cst.CSTTransformer):
    """``tl.program_id(a)`` written ``ids[a]`` and ``tl.num_programs(a)`` written ``sizes[a]`` (code)."""

    def __init__(self, ids: dict[int, str], sizes: dict[int, str]):
        self.ids, self.sizes = ids, sizes

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        name = _dotted(updated.func).removeprefix("triton.language.").removeprefix("tl.")
        if name not in ("program_id", "num_programs") or not updated.args or \
                not isinstance(updated.args[0].value, cst.Integer):
            return updated
        table = self.ids if name == "program_id" else self.sizes
        axis = int(updated.args[0].value.value)
        return cst.parse_expression(f"({table[axis]})") if axis in table else updated  # parenthesized: any context


def _body(tf: TritonFile, kernel: str, rewrite) -> str:
    """``tf`` with ``kernel``'s FunctionDef replaced by ``rewrite(def)``."""

    class One(cst.CSTTransformer):
        def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
            return rewrite(updated) if original.name.value == kernel else updated

    return tf.module.visit(One()).code


def _statements(text: str) -> list[cst.BaseStatement]:
    return list(cst.parse_module(text).body)


def swizzled_ids(linear: str, rows: str, cols: str, group: int, prefix: str) -> tuple[str, dict[int, str]]:
    """Statements mapping the linear tile id ``linear`` of a ``rows`` x ``cols`` tile grid to grouped
    (row, col) ids, ``GROUP_SIZE_M`` = ``group`` tile rows per group; and the two id names."""
    p = prefix
    text = (f"{p}group = {group} * {cols}\n"
            f"{p}first = ({linear} // {p}group) * {group}\n"
            f"{p}size = tl.minimum({rows} - {p}first, {group})\n"
            f"{p}pid0 = {p}first + ({linear} % {p}group) % {p}size\n"
            f"{p}pid1 = ({linear} % {p}group) // {p}size\n")
    return text, {0: f"{p}pid0", 1: f"{p}pid1"}


def _matmul_kernels(tf: TritonFile) -> list[str]:
    out = []
    for k in _launched(tf):
        facts = kernel_facts(tf, k)
        if facts.dot and facts.axes == {0, 1} and all(len(s.elements() or ()) == 2
                                                      for s in sites(tf) if s.kernel == k):
            out.append(k)
    return out


class Swizzle:
    """Grouped tile order for matmul kernels on a 2-D grid (see the module docstring)."""

    name = "swizzle"
    after: tuple[str, ...] = ("tile_sizes",)

    def detect(self, tf: TritonFile) -> list[str]:
        out = []
        for k in _matmul_kernels(tf):
            traced = _traced(tf, k)
            if traced is None or (len(traced.grid) == 2 and min(traced.grid) > 1):
                out.append(k)
        return out

    def space(self, tf: TritonFile, hw: HardwareSpec) -> list[dict[str, Any]]:
        if hw.kind != "gpu":
            return []
        return [{"kernel": k, "GROUP_SIZE_M": g} for k in self.detect(tf) for g in SWIZZLE_GROUPS]

    def apply(self, tf: TritonFile, params: dict[str, Any]) -> str:
        def rewrite(fn: cst.FunctionDef) -> cst.FunctionDef:
            body = fn.body.visit(_ProgramIds(*self._ids(params["GROUP_SIZE_M"])[1:]))
            prologue = _statements(self._ids(params["GROUP_SIZE_M"])[0])
            return fn.with_changes(body=body.with_changes(body=[*prologue, *body.body]))

        return _body(tf, params["kernel"], rewrite)

    @staticmethod
    def _ids(group: int) -> tuple[str, dict[int, str], dict[int, str]]:
        text, ids = swizzled_ids("_axon_sw_pid", "tl.num_programs(0)", "tl.num_programs(1)", group, "_axon_sw_")
        return "_axon_sw_pid = tl.program_id(0) + tl.program_id(1) * tl.num_programs(0)\n" + text, ids, {}


class Persistent:
    """Matmul kernels as a persistent loop over their tiles (see the module docstring)."""

    name = "persistent"
    after: tuple[str, ...] = ("tile_sizes", "swizzle")

    def detect(self, tf: TritonFile) -> list[str]:
        out = []
        for k in _matmul_kernels(tf):
            if kernel_facts(tf, k).returns or GRID_KEYWORD.format(0) in tf.kernels[k].params:
                continue
            out.append(k)
        return out

    def space(self, tf: TritonFile, hw: HardwareSpec) -> list[dict[str, Any]]:
        if hw.kind != "gpu":
            return []
        units = int(hw.value("compute.units"))
        points = []
        for k in self.detect(tf):
            traced = _traced(tf, k)
            for programs in (units, 2 * units):
                if traced is None or traced.programs > programs:
                    points.append({"kernel": k, "programs": programs})
        return points

    def apply(self, tf: TritonFile, params: dict[str, Any]) -> str:
        kernel = params["kernel"]
        launch = next(s for s in sites(tf) if s.kernel == kernel)
        elements = launch.elements() or []
        grid = [GRID_KEYWORD.format(i) for i in range(len(elements))]
        total = " * ".join(grid)
        ids = {0: "_axon_ps_tile % AXON_GRID_0", 1: "_axon_ps_tile // AXON_GRID_0"}

        def rewrite(fn: cst.FunctionDef) -> cst.FunctionDef:
            inner = fn.body.visit(_ProgramIds(ids, dict(enumerate(grid))))
            loop = cst.parse_statement(f"for _axon_ps_tile in range(tl.program_id(0), {total}, tl.num_programs(0)):\n"
                                       "    pass\n")
            loop = loop.with_changes(body=loop.body.with_changes(body=list(inner.body)))
            extra = [cst.Param(cst.Name(g), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
                     for g in grid]
            ps = list(fn.params.params)
            if ps and ps[-1].comma is cst.MaybeSentinel.DEFAULT:
                ps[-1] = ps[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            extra[-1] = extra[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return fn.with_changes(params=fn.params.with_changes(params=[*ps, *extra]),
                                   body=fn.body.with_changes(body=[loop]))

        text = _body(tf, kernel, rewrite)
        values = {g: Code(f"{launch.grid_name}[{i}]" if launch.grid_name else code(elements[i]))
                  for i, g in enumerate(grid)}
        return load(tf.path, text).module.visit(SetLaunchKeywords(kernel, values, grid=f"({params['programs']},)")).code


__all__ = ["TILE_POINTS", "KernelFacts", "Persistent", "Swizzle", "TileSizes", "kernel_facts", "swizzled_ids",
           "tile_constexprs"]
