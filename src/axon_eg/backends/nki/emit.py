"""Candidate -> one readable NKI kernel file, in the dialect the hardware file names (``features.nki_dialect``).

The file mirrors the Triton emitter's: a header that states the variant (rules, fusion groups with their
tiling and lowering, the instruction fusions that fired, predicted cost), then one ``@nki.jit`` kernel that
runs the groups in order, each as a loop nest over tiles. Every instruction sequence for a tile op is taken
from the proven lowerings (:func:`.synthesis.lower`, the first whose limits fit), and a comment names the
lowering entry it came from; then the admitted instruction-fusion rules are applied to the kernel body
(:mod:`.emit_fusion`), each fused instruction under a comment naming its rule.

Groups, one module each: element-wise groups, row reductions, last-axis slices/concats and prefix sums
(:mod:`.emit_rows`), matmuls with prologues and epilogues and 2-D transposes (:mod:`.emit_matmul`),
attention (:mod:`.emit_attention`). Groups pass values through HBM buffers. Anything else raises
:class:`NotLowerable` (a NotImplementedError) naming the op: library ops (conv, pool), matmul prologues
that are not row-wise, reductions over other axes, views that move data between rows and columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from axon_eg.backends.kernel import Kernel, identifier, shape_generic
from axon_eg.extract.candidates import Candidate
from axon_eg.extract.fusion import (
    ATTENTION,
    ELEMENTWISE,
    LAYOUT,
    MATMUL,
    REDUCTION,
    SCAN,
    FusionPlan,
    node_kind,
    viewed_output_source,
)
from axon_eg.hw import HardwareSpec
from axon_eg.ir import dims as D
from axon_eg.ir import traced

from .emit_attention import attention_group
from .emit_fusion import fuse
from .emit_matmul import matmul_group, transpose_group
from .emit_rows import WHOLE_ROW_OPS, row_group, scan_group
from .emit_writer import NotLowerable, Writer, nl_dtype, render

__all__ = ["NotLowerable", "emit"]

_HEADERS = {"current": "import nki\nimport nki.isa as nisa\nimport nki.language as nl\n",
            "legacy": "import neuronxcc.nki as nki\nimport neuronxcc.nki.isa as nisa\nimport neuronxcc.nki.language as nl\n"}


def emit(candidate: Candidate, hw: HardwareSpec, name: str,
         ranges: Mapping[str, tuple[int, int]] | None = None) -> Kernel:
    """One NKI kernel file for ``candidate`` on ``hw`` (a Trainium hardware description). ``ranges`` (dim ->
    inclusive (low, high)): shape-generic over them (``backends.kernel.shape_generic``): NKI traces a kernel
    for the shapes it is called with, so the kernel reads the dims off its arguments' shapes
    (``dim_M = x.shape[0]``), writes loop bounds and buffer shapes over them, and first raises where a
    guard its lowerings recorded fails (``ir.traced``)."""

    def build(values: dict[str, int] | None, recorder: Any) -> Kernel:
        return _emit(candidate, hw, name, values, recorder)

    if not ranges:
        return build(None, None)
    return shape_generic(build, candidate.plan.program, ranges, _code, NotLowerable)


def _code(source: str) -> str:
    """A kernel file without its docstring header (which states sizes and predictions)."""
    return source[source.index("@nki.jit"):]


def _emit(candidate: Candidate, hw: HardwareSpec, name: str, values: dict[str, int] | None, recorder: Any) -> Kernel:
    dialect = str(hw.value("features.nki_dialect"))
    target = hw.name
    plan: FusionPlan = candidate.plan
    if values is not None:
        plan = FusionPlan(traced.program_over(plan.program, values), plan.groups)
    program = plan.program
    taken: set[str] = set()
    params = [identifier(s.name, taken) for s in program.inputs]
    hbm: dict[int, str] = dict(zip(program.input_ids, params))
    w = Writer(dialect, target)
    entry = identifier(name, taken)
    dims = _read_dims(program, params, values) if values is not None else []
    # every group's outputs live in HBM: the program's outputs, and values a later group reads
    produced: dict[int, int] = {n: gi for gi, g in enumerate(plan.groups) for n in g.nodes}
    needed = set(program.outputs) | {i for g in plan.groups for n in g.nodes for i in program.nodes[n].inputs
                                     if produced.get(i, -1) not in (-1, produced[n])}
    # an output that is a flat view of a computed value (``fusion.viewed_output_source``) is in no group: the
    # value's group writes into the output's HBM tensor reshaped to the value's shape
    viewed = {o: v for o in program.outputs if (v := viewed_output_source(program, o)) is not None}
    needed |= set(viewed.values())
    for n in sorted(needed):
        if n in hbm or n in viewed.values():
            continue
        hbm[n] = f"out{list(program.outputs).index(n)}" if n in program.outputs else f"hbm{n}"
        shape = tuple(program.concrete_shape(n))
        w.line(f"{hbm[n]} = nl.ndarray({shape}, dtype={nl_dtype(program.nodes[n].dtype.name)}, buffer=nl.shared_hbm)")
    for o, v in viewed.items():
        hbm.setdefault(v, f"{hbm[o]}.reshape({tuple(program.concrete_shape(v))})")
    isa_choice = dict(candidate.isa)
    described: list[str] = []
    for gi, g in enumerate(plan.groups):
        tiling = dict(candidate.tilings[gi].values) if gi < len(candidate.tilings) else {}
        outputs = {n: hbm[n] for n in g.nodes if n in needed}
        ops = ", ".join(program.nodes[n].op for n in g.nodes if node_kind(program.nodes[n].op))
        w.line(f"# group {gi} ({g.kind}): {ops}")
        slicing = g.kind == LAYOUT and all(program.nodes[n].op in WHOLE_ROW_OPS for n in g.nodes
                                           if node_kind(program.nodes[n].op))
        if g.kind in (ELEMENTWISE, REDUCTION) or slicing:
            how = row_group(w, program, g, tiling, hbm, outputs, target, hw)
        elif g.kind == SCAN:
            how = scan_group(w, program, g, tiling, hbm, outputs, target, hw)
        elif g.kind == MATMUL:
            how = matmul_group(w, program, g, tiling, hbm, outputs, target, hw, isa_choice.get(gi))
        elif g.kind == LAYOUT:
            how = transpose_group(w, program, g, isa_choice.get(gi), hbm, outputs, target, hw)
        elif g.kind == ATTENTION:
            how = attention_group(w, program, g, tiling, hbm, outputs, target, hw)
        else:
            raise NotLowerable(f"{g.kind} group ({ops}): no NKI lowering for {g.kind} groups (library ops such as conv "
                               f"and pool are out of scope)")
        described.append(f"#   {gi}: {g.kind} [{ops}] {how}")
    fired = fuse(w.lines, target)
    counts = {r: fired.count(r) for r in dict.fromkeys(fired)}
    fusions = [f"#   {n} x {r}" for r, n in counts.items()] or ["#   none"]
    results = ", ".join(hbm[o] for o in program.outputs)
    header = [f'"""NKI kernel {entry} for {target} ({dialect} dialect), emitted by axon_eg.backends.nki.emit.', "",
              f"plan: {plan.name}; rules: {', '.join(candidate.variant.rules) or 'none'}; "
              f"predicted {candidate.predicted_seconds * 1e6:.3f} us", '"""', ""]
    guards = [] if recorder is None else [
        ln for g in recorder.guards for ln in (
            f"    if not ({g.text()}):  # a size decision of the lowering (ir.traced)",
            f"        raise ValueError(f\"{entry}: built for sizes where {g.readable()}; called with "
            + ", ".join(f"{d} = {{{traced.param(d)}}}" for d in sorted(g.dims)) + '")')]
    lines = [*header, _HEADERS[dialect].rstrip(), "", "# fusion groups (tiling):", *described,
             "# instruction fusions (proven rules, applications):", *fusions, "", "", "@nki.jit",
             f"def {entry}({', '.join(params)}):", *dims, *guards, *render(w.lines, dialect),
             f"    return {results}", ""]
    meta = {"lowering": f"nki:{len(plan.groups)}", "dialect": dialect, "plan": plan.name, "groups": len(plan.groups),
            "fused_instructions": len(fired), "fusions": counts,
            "rules": list(candidate.variant.rules), "predicted_us": candidate.predicted_seconds * 1e6}
    return Kernel(name, "\n".join(lines), entry, "return", "candidate", {}, meta)


def _read_dims(program: Any, params: list[str], values: Mapping[str, int]) -> list[str]:
    """The kernel's first lines: each run-time dim read off the first input that has it as an axis of its
    own (NotLowerable when none has: an NKI kernel knows the shapes of its arguments only)."""
    lines = []
    for d in sorted(values):
        found = next(((p, k) for p, node in zip(params, program.input_ids)
                      for k, size in enumerate(program.nodes[node].shape) if size == D.sym(d)), None)
        if found is None:
            raise NotLowerable(f"dim {d} is no input's axis: an NKI kernel reads its sizes from its inputs")
        lines.append(f"    {traced.param(d)} = {found[0]}.shape[{found[1]}]")
    return lines
