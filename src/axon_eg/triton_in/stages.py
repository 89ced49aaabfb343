"""Stages: source-to-source transformations of an existing Triton program, each with its detector.

A stage reads a :class:`~axon_eg.triton_in.source.TritonFile`, says where it applies (``detect``: empty,
the stage is skipped), offers the parameter points of its space on a hardware description (``space``: the
numbers come from ``data/hw_costs``, never from here) and writes the file at one point (``apply``: a libcst
transformation, so only what the stage changes moves). Stages run in dependency order (``after``).

- :class:`LaunchKnobs`: the launch's ``num_warps`` and ``num_stages`` of each kernel not under
  ``@triton.autotune`` (which picks them itself) nor under the tile stage (``tiles.TileSizes``, whose space
  holds them), one kernel at a time, over the hardware file's
  ``knobs.num_warps`` and ``knobs.num_stages`` range (``num_stages`` only for a kernel with a loop, the
  only thing it pipelines) (on an Intel XPU ``num_warps``, ``grf_mode`` and
  ``warp_size``). Launch knobs never change what a kernel computes; the
  cascade still checks every candidate.
- :class:`AutotuneGrid`: the same grid as an ``@triton.autotune`` of the kernel, chosen at run time per
  value of its size arguments.
- :class:`DtypeCorrection`: ``tl.float64`` inside kernels written as ``tl.float32`` (fp64 runs at a fraction
  of the fp32 rate; the reference's tolerance decides whether float32 is enough).
- :class:`DotPrecision`: fp32 ``tl.dot`` in IEEE precision as three TF32 products on tensor cores.
- :class:`BlockPointers`: block pointers written as masked pointer arithmetic (where this Triton has them;
  retargeting does it to the input where it has not).
- The stages that re-cut the work (tile sizes, swizzle, persistent loop) are in :mod:`axon_eg.triton_in.tiles`,
  the tensor-descriptor stage in :mod:`axon_eg.triton_in.descriptors`.

Each stage's points are applied to the input; stages do not build on one another's winners yet (that needs
a measurement per round).

:func:`wrapper_unchanged` is the fixed-harness rule every candidate passes before it is measured: apart
from the kernels' own code and their launches (keyword arguments that are literals; a grid that follows
the tile sizes or is a persistent launch's: :mod:`axon_eg.triton_in.launches`), the file must be the
input's, byte for byte (the ``Model`` / ``ModelNew`` wrappers, input generation and everything the harness
calls).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import libcst as cst

from axon_eg.hw import HardwareSpec

from . import block_pointers
from .descriptors import TensorDescriptors
from .launches import SetLaunchKeywords, grid_variables, launch_changes_allowed
from .source import TritonFile, _dotted, load
from .tiles import Persistent, Swizzle, TileSizes


@dataclass(frozen=True)
class Point:
    """One candidate of a stage: its parameters and the file it writes."""

    stage: str
    params: dict[str, Any] = field(hash=False)
    text: str = field(hash=False, repr=False)


class Stage(Protocol):
    name: str
    after: tuple[str, ...]

    def detect(self, tf: TritonFile) -> list[str]: ...

    def space(self, tf: TritonFile, hw: HardwareSpec) -> list[dict[str, Any]]: ...

    def apply(self, tf: TritonFile, params: dict[str, Any]) -> str: ...


def _kernel_def(tf: TritonFile, kernel: str) -> cst.FunctionDef:
    """The top-level ``def`` of ``kernel`` in ``tf``."""
    return next(n for n in tf.module.body if isinstance(n, cst.FunctionDef) and n.name.value == kernel)


def _has_loop(tf: TritonFile, kernel: str) -> bool:
    """Whether ``kernel``'s body has a loop (what ``num_stages`` software-pipelines)."""
    node = _kernel_def(tf, kernel)
    found = []

    class Finder(cst.CSTVisitor):
        def visit_For(self, n: cst.For) -> None:
            found.append(n)

        def visit_While(self, n: cst.While) -> None:
            found.append(n)

    node.body.visit(Finder())
    return bool(found)


class LaunchKnobs:
    """``num_warps`` x ``num_stages`` for one kernel's launches at a time (see the module docstring)."""

    name = "launch_knobs"
    after: tuple[str, ...] = ()

    def detect(self, tf: TritonFile) -> list[str]:
        """Launched kernels not under ``@triton.autotune`` and not covered by the tile stage (whose template
        space searches warps and stages jointly with the tiles)."""
        launched = {launch.kernel for launch in tf.launches}
        tiled = set(TileSizes().detect(tf))
        return [k.name for k in tf.kernels.values() if k.name in launched and not k.autotuned and k.name not in tiled]

    def space(self, tf: TritonFile, hw: HardwareSpec) -> list[dict[str, Any]]:
        """NVIDIA: ``num_warps`` x ``num_stages``. Intel XPU (a hardware file with ``knobs.grf_mode``):
        ``num_warps`` x ``grf_mode`` x ``warp_size``, the stages as launched; a large register file (256 or
        512) only up to ``knobs.large_grf_max_warps``."""
        if hw.kind != "gpu":
            return []
        warps = [int(w) for w in hw.value("knobs.num_warps")]
        if hw.get("knobs.grf_mode"):
            cap = int(hw.get("knobs.large_grf_max_warps") or max(warps))
            grid = [{"num_warps": w, "grf_mode": str(g), "warp_size": int(ws)} for w in warps
                    for g in hw.value("knobs.grf_mode") for ws in hw.value("knobs.warp_size")
                    if not (str(g) in ("256", "512") and w > cap)]
        else:
            stages = range(int(hw.value("knobs.num_stages.min")), int(hw.value("knobs.num_stages.max")) + 1)
            grid = [{"num_warps": w, "num_stages": s} for w in warps for s in stages]
        points = []
        for kernel in self.detect(tf):
            given = [launch.keywords for launch in tf.launches if launch.kernel == kernel]
            pipelined = _has_loop(tf, kernel)
            for knobs in grid:
                if not pipelined and "num_stages" in knobs:
                    if knobs["num_stages"] != int(hw.value("knobs.num_stages.min")):
                        continue  # no loop to pipeline: the stages change nothing
                    knobs = {k: v for k, v in knobs.items() if k != "num_stages"}
                if all(all(kw.get(k) == v for k, v in knobs.items()) for kw in given):
                    continue  # what the input already launches
                points.append({"kernel": kernel, **knobs})
        return points

    def apply(self, tf: TritonFile, params: dict[str, Any]) -> str:
        values = {k: params[k] for k in ("num_warps", "num_stages", "grf_mode", "warp_size") if k in params}
        return tf.module.visit(SetLaunchKeywords(params["kernel"], values)).code


class _Autotune(cst.CSTTransformer):
    """``@triton.autotune(configs=..., key=...)`` over ``kernel``'s ``@triton.jit``; its launches lose the
    ``num_warps`` / ``num_stages`` the configs now choose."""

    def __init__(self, kernel: str, decorator: str):
        self.kernel, self.decorator = kernel, decorator

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        if updated.name.value != self.kernel:
            return updated
        extra = cst.Decorator(decorator=cst.parse_expression(self.decorator))
        return updated.with_changes(decorators=(extra, *updated.decorators))

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        func = updated.func
        if isinstance(func, cst.Subscript) and isinstance(func.value, cst.Name) and func.value.value == self.kernel:
            args = [a for a in updated.args if a.keyword is None or a.keyword.value not in ("num_warps", "num_stages")]
            if args:
                args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return updated.with_changes(args=args)
        return updated


_SIZE_HINTS = (".shape", ".numel(", ".size(", "len(")


class AutotuneGrid:
    """``@triton.autotune`` over the hardware file's ``num_warps`` x ``num_stages`` for each launched kernel
    not already autotuned: the choice made at run time, per value of the size arguments (``key``: the
    parameters its launches pass sizes to, ``x.shape[1]``, ``x.numel()``, ``len(...)``)."""

    name = "autotune_grid"
    after: tuple[str, ...] = ("launch_knobs",)

    def detect(self, tf: TritonFile) -> list[str]:
        launched = {launch.kernel for launch in tf.launches}
        return [k.name for k in tf.kernels.values() if k.name in launched and not k.autotuned]

    def space(self, tf: TritonFile, hw: HardwareSpec) -> list[dict[str, Any]]:
        if hw.kind != "gpu":
            return []
        warps = [int(w) for w in hw.value("knobs.num_warps")]
        stages = list(range(int(hw.value("knobs.num_stages.min")), int(hw.value("knobs.num_stages.max")) + 1))
        return [{"kernel": k, "num_warps": warps, "num_stages": stages if _has_loop(tf, k) else stages[:1],
                 "key": self.key(tf, k)} for k in self.detect(tf)]

    @staticmethod
    def key(tf: TritonFile, kernel: str) -> list[str]:
        """The kernel's parameters that its launches pass a size expression to (positionally or by name)."""
        params = tf.kernels[kernel].params
        found: list[str] = []

        class Finder(cst.CSTVisitor):
            def visit_Call(self, node: cst.Call) -> None:
                func = node.func
                if not (isinstance(func, cst.Subscript) and isinstance(func.value, cst.Name) and func.value.value == kernel):
                    return
                for i, a in enumerate(node.args):
                    name = a.keyword.value if a.keyword is not None else (params[i] if i < len(params) else None)
                    code = cst.Module([]).code_for_node(a.value)
                    if name in params and any(h in code for h in _SIZE_HINTS) and name not in found:
                        found.append(name)

        tf.module.visit(Finder())
        return found

    def apply(self, tf: TritonFile, params: dict[str, Any]) -> str:
        configs = ", ".join(f"triton.Config({{}}, num_warps={w}, num_stages={s})"
                            for w in params["num_warps"] for s in params["num_stages"])
        decorator = f"triton.autotune(configs=[{configs}], key={params['key']!r})"
        return tf.module.visit(_Autotune(params["kernel"], decorator)).code


class _InKernels(cst.CSTTransformer):
    """A transformer that knows whether it is inside one of the kernels named (``self.inside``)."""

    def __init__(self, kernels: set[str]):
        self.kernels, self.inside = kernels, 0

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.inside += node.name.value in self.kernels

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self.inside -= original.name.value in self.kernels
        return updated


class _Narrow(_InKernels):
    """Inside the kernels named: every ``tl.float64`` written as ``tl.float32``."""

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        if self.inside and updated.attr.value == "float64" and _dotted(updated.value) in ("tl", "triton.language"):
            return updated.with_changes(attr=cst.Name("float32"))
        return updated


class DtypeCorrection:
    """Kernels that compute in ``tl.float64`` (accumulators, casts) computed in ``tl.float32`` instead: GPUs
    run fp64 at a small fraction of the fp32 rate (the H100 and H200: 1/2 on SXM parts, far less on others),
    and a float32 result is what the reference's tolerance asks for; the cascade checks that it holds."""

    name = "dtype_correction"
    after: tuple[str, ...] = ()

    def detect(self, tf: TritonFile) -> list[str]:
        found: list[str] = []

        class Finder(cst.CSTVisitor):
            def __init__(self) -> None:
                self.kernel: str | None = None

            def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
                if node.name.value in tf.kernels:
                    self.kernel = node.name.value

            def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
                if node.name.value in tf.kernels:
                    self.kernel = None

            def visit_Attribute(self, node: cst.Attribute) -> None:
                if self.kernel and node.attr.value == "float64" and _dotted(node.value) in ("tl", "triton.language") \
                        and self.kernel not in found:
                    found.append(self.kernel)

        tf.module.visit(Finder())
        return found

    def space(self, tf: TritonFile, hw: HardwareSpec) -> list[dict[str, Any]]:
        kernels = self.detect(tf)
        return [{"kernels": kernels}] if kernels else []

    def apply(self, tf: TritonFile, params: dict[str, Any]) -> str:
        return tf.module.visit(_Narrow(set(params["kernels"]))).code


_IEEE = ("'ieee'", '"ieee"')


class _DotPrecision(_InKernels):
    """Inside the kernels named: ``tl.dot(..., input_precision="ieee")`` (or ``allow_tf32=False``) with
    ``input_precision`` set to ``precision``."""

    def __init__(self, kernels: set[str], precision: str):
        super().__init__(kernels)
        self.precision = precision

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if not self.inside or _dotted(updated.func) not in ("tl.dot", "triton.language.dot") or not _ieee_dot(updated):
            return updated
        value = cst.SimpleString(repr(self.precision))
        args = [a.with_changes(keyword=cst.Name("input_precision"), value=value)
                if a.keyword is not None and a.keyword.value in ("input_precision", "allow_tf32") else a
                for a in updated.args]
        return updated.with_changes(args=args)


def _ieee_dot(call: cst.Call) -> bool:
    """Whether a ``tl.dot`` call asks for IEEE fp32 products (``input_precision="ieee"``, ``allow_tf32=False``)."""
    for a in call.args:
        if a.keyword is None:
            continue
        code = cst.Module([]).code_for_node(a.value)
        if (a.keyword.value == "input_precision" and code in _IEEE) or (a.keyword.value == "allow_tf32" and code == "False"):
            return True
    return False


class DotPrecision:
    """fp32 ``tl.dot`` in IEEE precision (CUDA-core FMAs) as three TF32 products (``input_precision="tf32x3"``:
    the tensor cores, the error of fp32; measured on the H200: 1427 us against cuBLAS fp32's 2709 us at 4096^3,
    rms error 2.5e-7 of the output's rms, ``compute.measured_peak.fp32_dot_3xtf32``), on a GPU whose hardware
    file lists a TF32 peak. The cascade checks that the reference's tolerance holds."""

    name = "dot_precision"
    after: tuple[str, ...] = ("dtype_correction",)

    def detect(self, tf: TritonFile) -> list[str]:
        found: list[str] = []
        for kernel in tf.kernels:
            node = next(n for n in tf.module.body if isinstance(n, cst.FunctionDef) and n.name.value == kernel)
            calls: list[cst.Call] = []

            class Finder(cst.CSTVisitor):
                def visit_Call(self, n: cst.Call) -> None:
                    if _dotted(n.func) in ("tl.dot", "triton.language.dot") and _ieee_dot(n):
                        calls.append(n)

            node.body.visit(Finder())
            if calls:
                found.append(kernel)
        return found

    def space(self, tf: TritonFile, hw: HardwareSpec) -> list[dict[str, Any]]:
        kernels = self.detect(tf)
        if hw.kind != "gpu" or hw.get("compute.peak.tf32") is None or not kernels:
            return []
        return [{"kernels": kernels, "input_precision": "tf32x3"}]

    def apply(self, tf: TritonFile, params: dict[str, Any]) -> str:
        return tf.module.visit(_DotPrecision(set(params["kernels"]), params["input_precision"])).code


class BlockPointers:
    """Kernels written with block pointers (``tl.make_block_ptr``, Intel's habit) with them written as the
    masked pointer arithmetic they stand for (:mod:`axon_eg.triton_in.block_pointers`): on NVIDIA GPUs Triton
    lowers block pointers itself, and the explicit form is what the other stages read. Where the Triton
    installed has no block pointers, retargeting has already done this to the input."""

    name = "block_pointers"
    after: tuple[str, ...] = ()

    def detect(self, tf: TritonFile) -> list[str]:
        return [k for k in tf.kernels if "make_block_ptr" in tf.module.code_for_node(_kernel_def(tf, k))]

    def space(self, tf: TritonFile, hw: HardwareSpec) -> list[dict[str, Any]]:
        kernels = self.detect(tf)
        return [{"kernels": kernels}] if kernels else []

    def apply(self, tf: TritonFile, params: dict[str, Any]) -> str:
        return block_pointers.rewrite(tf.text, set(params["kernels"]), str(tf.path))[0]


def _stages() -> tuple[Stage, ...]:
    return (BlockPointers(), DtypeCorrection(), DotPrecision(), LaunchKnobs(), TileSizes(), Swizzle(), TensorDescriptors(),
            Persistent(), AutotuneGrid())


STAGES: tuple[Stage, ...] = _stages()
"""Every stage, in dependency order (each one's ``after`` names stages before it)."""


def points(tf: TritonFile, hw: HardwareSpec, stages: Sequence[Stage] = STAGES) -> list[Point]:
    """Every stage's candidates for ``tf`` on ``hw`` (stages whose detector finds nothing give none)."""
    out: list[Point] = []
    for stage in stages:
        if not stage.detect(tf):
            continue
        out += [Point(stage.name, p, stage.apply(tf, p)) for p in stage.space(tf, hw)]
    return out


_GRID_PARAM = re.compile(r"AXON_GRID_\d+$")


class _Skeleton(cst.CSTTransformer):
    """The file without what stages may change: each kernel's decorators and body (and the ``AXON_GRID_<i>``
    parameters a persistent kernel takes), its launches' grids and
    keyword arguments, and the values of the variables those grids name (``launches.launch_changes_allowed``
    checks what changed there)."""

    def __init__(self, kernels: set[str], grids: set[str]):
        self.kernels, self.grids = kernels, grids

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        if updated.name.value not in self.kernels:
            return updated
        params = [p for p in updated.params.params if not _GRID_PARAM.match(p.name.value)]
        if params:
            params[-1] = params[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(decorators=(), params=updated.params.with_changes(params=params),
                                    body=cst.IndentedBlock(body=[cst.SimpleStatementLine([cst.Pass()])]))

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        if len(updated.targets) == 1 and isinstance(updated.targets[0].target, cst.Name) \
                and updated.targets[0].target.value in self.grids:
            return updated.with_changes(value=cst.Name("GRID"))
        return updated

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        func = updated.func
        if isinstance(func, cst.Subscript) and _dotted(func.value) in self.kernels:
            return updated.with_changes(func=func.with_changes(slice=[cst.SubscriptElement(cst.Index(cst.Name("GRID")))]),
                                        args=[a for a in updated.args if a.keyword is None])
        return updated


def wrapper_unchanged(original: TritonFile, text: str) -> str | None:
    """None when ``text`` differs from the input only inside its kernels and in their launches as
    :func:`~axon_eg.triton_in.launches.launch_changes_allowed` allows (keyword arguments made literals, a
    grid following the tile sizes, a persistent launch); else why (the first differing line outside them,
    or the launch argument)."""
    try:
        candidate = load(original.path, text)
    except Exception as exc:  # noqa: BLE001 - a candidate that no longer parses as a Triton program
        return f"not a Triton program any more: {exc}"
    if set(candidate.kernels) != set(original.kernels):
        return f"kernels {sorted(original.kernels)} became {sorted(candidate.kernels)}"
    names = set(original.kernels)
    grids = grid_variables(original) | grid_variables(candidate)
    a = original.module.visit(_Skeleton(names, grids)).code.splitlines()
    b = candidate.module.visit(_Skeleton(names, grids)).code.splitlines()
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"changed outside the kernels (skeleton line {i + 1}): {x.strip()!r} -> {y.strip()!r}"
    if len(a) != len(b):
        return f"changed outside the kernels: {len(a)} skeleton lines became {len(b)}"
    return launch_changes_allowed(original, candidate)


__all__ = ["STAGES", "AutotuneGrid", "DotPrecision", "DtypeCorrection", "LaunchKnobs", "Point", "Stage", "points",
           "wrapper_unchanged"]
