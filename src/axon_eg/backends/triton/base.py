"""What a fusion-group lowering hands to the kernel-file emitter: one ``@triton.jit`` function, the
buffers it reads and writes, its launch grid and constexprs, and its static resource use (checked
against the hardware limits in the structure stage of the verification cascade)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from axon_eg.backends.kernel import NotLowerable  # noqa: F401  (the lowerings import it from here)
from axon_eg.extract.templates import knobs
from axon_eg.ir import dims as D
from axon_eg.ir.program import Program
from axon_eg.ir.traced import cdiv  # noqa: F401  (the lowerings import it from here)


@dataclass(frozen=True)
class GroupKernel:
    name: str  # the jit function's name, e.g. "_g0_rmsnorm"
    source: str  # the @triton.jit function
    reads: tuple[int, ...]  # node ids whose HBM buffers are passed, in argument order
    writes: tuple[int, ...]  # node ids the kernel stores, after the reads in argument order
    grid: int
    constexprs: tuple[tuple[str, int], ...]  # tile sizes, passed as keywords
    num_warps: int
    resources: dict[str, Any] = field(default_factory=dict, compare=False)
    note: str = ""  # one line for the file header: what the kernel does and how it is tiled
    launch: tuple[tuple[str, Any], ...] = ()  # further launch keywords: num_stages, grf_mode (Intel XPU), ...
    grid_meta: str | None = None  # the grid as an expression of META (the constexprs), for @triton.autotune
    tiling_keys: tuple[tuple[str, str], ...] = ()  # constexpr -> the tiling parameter it comes from
    host: bool = False  # ``name`` is a Python function taking (reads..., writes..., **launch knobs) that
    # allocates scratch and launches the group's jit functions itself; else ``name`` is the jit function
    persistent: bool = False  # the kernel loops over its ``grid`` tiles with a stride of its program
    # count; the emitter launches min(grid, programs resident on the whole GPU)
    dims: tuple[str, ...] = ()  # run-time dims the jit function takes last, by keyword (``dim_M``: a
    # shape-generic kernel, ``ir.traced``); its ``grid`` is then an expression of them


def attr(program: Program, node: int, key: str) -> Any:
    """A node attribute with symbolic dims evaluated under the program's bindings."""
    v = program.nodes[node].attrs[key]
    if isinstance(v, D.Sym):
        return D.evaluate(v, program.bindings)
    if isinstance(v, tuple):
        return tuple(D.evaluate(x, program.bindings) if isinstance(x, D.Sym) else x for x in v)
    return v


INT32_LIMIT = 2**31
"""Elements from which a tensor's offsets must be 64-bit (Triton computes them in int32 by default)."""


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(math.prod(shape[k + 1:]) for k in range(len(shape)))


def resources(name: str, block_elems: int, num_warps: int, grid: int, live: int, smem_bytes: int = 0,
              warp_size: int | None = None) -> dict[str, Any]:
    """Static resource use of one launch, in the units of the manifest's ``limits`` (``warp_size`` None:
    the default target's, ``extract.templates.knobs``)."""
    threads = num_warps * (warp_size or knobs().warp_size)
    return {"launch": name, "block_elems": block_elems, "threads": threads, "grid": grid,
            "smem_bytes": smem_bytes, "regs_per_thread": math.ceil(block_elems * live / threads)}


def unflat(flat: str, shape: tuple[int, ...]) -> tuple[str, ...]:
    """The row-major multi-index of ``shape`` at flat position ``flat`` (canonical text, so that the
    same position always gives the same strings)."""
    out = []
    for k, (d, s) in enumerate(zip(shape, contiguous_strides(shape))):
        if d == 1:
            out.append("0")
            continue
        e = f"({flat})" if s == 1 else f"(({flat}) // {s})"
        out.append(e if k == 0 or s * d >= math.prod(shape) else f"({e} % {d})")
    return tuple(out)
