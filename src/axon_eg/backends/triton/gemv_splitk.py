"""A GEMV whose vector is a row reduction fused into it, split over K: ``x @ sum(W, -1, keepdims)``.

After the νGraph moves a reduction across N into the right operand (rules ``sum1_into_matmul_B`` /
``mean1_into_matmul_B``: ``sum(x @ W, -1) == x @ sum(W, -1)``), the program is a row sum of ``W [K, N]``
and a GEMV of ``x [M, K]`` with it. Run as two kernels, each streams 32 MB (at 4096^2 bf16) through a
grid too small to fill the GPU (H200: 2 x ~13 us at ~2.3 TB/s, ncu: 0.65 waves, 45% occupancy). Fused
here, every byte of ``x`` and ``W`` is read once by one wide grid:

- ``partial``: program ``p`` owns the ``SPLIT_K`` rows ``k`` of ``W`` and the same columns of ``x``. It sums its
  rows of ``W`` over N in ``[SPLIT_K, BLOCK_R]`` tiles (``r[k]``, fp32, never stored), then streams ``x``
  in ``[BLOCK_R, SPLIT_K]`` tiles and writes ``sum_k x[m, k] * r[k]`` for every row ``m`` to a fp32
  scratch row ``part[p, :]``;
- ``finish``: ``y[m] = sum_p part[p, m]`` (``K / SPLIT_K`` partials per output, 2 MB at 4096^2), rounded once.

No atomics: the result is deterministic. The group's host function allocates the scratch buffer and
launches both kernels (``GroupKernel.host``).

Measured (H200, Triton 3.6, sum_matmul at 4096^3 bf16, ``benchmarks/results/2026-12-01-sweeps``): 33-35 us
for the best tilings (SPLIT_K=16, BLOCK_R=1024-2048) against 29.7 us for the row-sum + GEMV plan: the
strips of x (32-64 contiguous bytes per row, one DRAM page per row) stream at ~2 TB/s, below the two
row-major kernels. It stays a candidate next to them and the selection measures both; the cost model does
not yet charge strided strips, so the ranking keeps the row-major plan first on its tie-breaks.
"""

from __future__ import annotations

from axon_eg.extract.fusion import FusionPlan
from axon_eg.extract.recognisers import recognise
from axon_eg.extract.templates import Tile, Tiling
from axon_eg.ir import ops as O

from .base import INT32_LIMIT, GroupKernel, NotLowerable, cdiv, resources
from .templates import SplitKTile
from .tl_expressions import lit, mean_scale

_VIEWS = O.flat_views()
FINISH_COLS = 32  # outputs per program of the finishing kernel


def match(plan: FusionPlan, gi: int) -> tuple[int, int, int, str, float] | None:
    """(x node, W node, matmul node, reduction op, scale) when group ``gi`` is ``x @ reduce(W, -1)``
    followed by views only, with ``x [M, K]`` and ``W [K, N]`` 2-D buffers (row-major: buffers outside a group
    are, the launcher materializes views) ; else None."""
    program = plan.program
    nodes = set(plan.groups[gi].nodes)
    mms = [n for n in nodes if program.nodes[n].kind is O.OpKind.CONTRACTION]
    if len(mms) != 1:
        return None
    mm = mms[0]
    got = recognise("gemv_of_sum", program, mm, inside=nodes)
    if not got or got.nodes["w"] in nodes:
        return None
    x, w, b = got.nodes["x"], got.nodes["w"], program.nodes[mm].inputs[1]
    r = program.nodes[b]
    wshape = program.concrete_shape(w)
    if len(wshape) != 2 or tuple(got.attrs["axes"]) not in ((1,), (-1,)):
        return None
    if x in nodes or len(program.concrete_shape(x)) != 2 or program.concrete_shape(x)[1] != wshape[0]:
        return None
    if any(program.nodes[n].op not in _VIEWS for n in nodes - {mm, b}):
        return None
    scale = mean_scale(r.op, wshape[1])
    return x, w, mm, r.op, 1.0 if scale is None else scale


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def check(plan: FusionPlan, gi: int, tiling: Tiling | Tile | None, warp_size: int | None = None) -> bool:
    """NotLowerable with :func:`lower`'s reason when it cannot lower the group (not the split-K pattern, more
    than one output, 64-bit offsets), without generating code; True when it can. :func:`lower` calls it first."""
    program = plan.program
    found = match(plan, gi)
    if found is None:
        raise NotLowerable("split-K GEMV: the group is not x @ sum(W, -1) (or mean) followed by views")
    x, w, mm, op, scale = found
    outs = plan.outputs_of(gi)
    if len(outs) != 1:
        raise NotLowerable(f"split-K GEMV: the group writes {len(outs)} tensors, the lowering one")
    m, k = program.concrete_shape(x)
    n = program.concrete_shape(w)[1]
    if max(m * k, k * n) >= INT32_LIMIT:
        raise NotLowerable("split-K GEMV: 32-bit offsets only")
    SplitKTile.read(tiling)
    return True


def lower(plan: FusionPlan, gi: int, tiling: Tiling | Tile | None, name: str, warp_size: int | None = None) -> GroupKernel:
    program = plan.program
    check(plan, gi, tiling, warp_size)
    x, w, mm, op, scale = match(plan, gi)  # type: ignore[misc]
    outs = plan.outputs_of(gi)
    m, k = program.concrete_shape(x)
    n = program.concrete_shape(w)[1]
    tile = SplitKTile.read(tiling)
    split, block_r, warps, finish_warps = tile.SPLIT_K, tile.BLOCK_R, tile.num_warps, tile.finish_warps
    parts = cdiv(k, split)
    parts_pow2 = 1 << max(0, (parts - 1).bit_length())
    finish_grid = cdiv(m, FINISH_COLS)
    kmask = "" if k % split == 0 else "kmask"
    scaled = f" * {lit(scale)}" if scale != 1.0 else ""

    def masked(*conds: str) -> str:
        conds = tuple(c for c in conds if c)
        return " & ".join(conds)

    w_mask = masked("kmask[:, None]" if kmask else "", "(cn[None, :] < N)" if n % block_r else "")
    x_mask = masked("(rm[:, None] < M)" if m % block_r else "", "kmask[None, :]" if kmask else "")
    w_load = f"tl.load(p{w} + rk[:, None] * N + cn[None, :]" + (f", mask={w_mask}, other=0.0)" if w_mask else ")")
    x_load = f"tl.load(p{x} + rm[:, None] * K + rk[None, :]" + (f", mask={x_mask}, other=0.0)" if x_mask else ")")
    store_mask = ", mask=rm < M" if m % block_r else ""
    out_dtype = program.nodes[outs[0]].dtype
    kmask_line = "    kmask = rk < K\n" if kmask else ""
    part_src = f'''@triton.jit
def {name}_partial(p{x}, p{w}, part, M: tl.constexpr, K: tl.constexpr, N: tl.constexpr, SPLIT_K: tl.constexpr,
        BLOCK_R: tl.constexpr):
    # program p owns rows rk of W and the same columns of x
    pid = tl.program_id(0)
    rk = pid * SPLIT_K + tl.arange(0, SPLIT_K)
{kmask_line}    # r = {op}(W[rk, :], -1), the GEMV's vector (the rule moved the reduction here): fp32, not stored
    acc = tl.zeros([SPLIT_K, BLOCK_R], tl.float32)
    for n0 in range(0, N, BLOCK_R):
        cn = n0 + tl.arange(0, BLOCK_R)
        acc += {w_load}.to(tl.float32)
    r = tl.sum(acc, axis=1){scaled}
    # this program's share of every output: x[:, rk] @ r
    for m0 in range(0, M, BLOCK_R):
        rm = m0 + tl.arange(0, BLOCK_R)
        a = {x_load}.to(tl.float32)
        tl.store(part + pid * M + rm, tl.sum(a * r[None, :], axis=1){store_mask})
'''
    fin_src = f'''@triton.jit
def {name}_finish(part, out0, M: tl.constexpr, PARTS: tl.constexpr, PARTS_POW2: tl.constexpr, COLS: tl.constexpr):
    # y[m] = sum over the K slices of their partial sums (fixed order: deterministic)
    rm = tl.program_id(0) * COLS + tl.arange(0, COLS)
    rp = tl.arange(0, PARTS_POW2)
    tile = tl.load(part + rp[:, None] * M + rm[None, :], mask=(rp[:, None] < PARTS) & (rm[None, :] < M), other=0.0)
    tl.store(out0 + rm, tl.sum(tile, axis=0), mask=rm < M)
'''
    host = f'''def {name}(p{x}, p{w}, out0, **launch):
    """Both launches of the group; ``launch``: vendor launch knobs (Intel XPU grf_mode, warp_size)."""
    part = torch.empty(({parts}, {m}), dtype=torch.float32, device=out0.device)
    {name}_partial[({parts},)](p{x}, p{w}, part, M={m}, K={k}, N={n}, SPLIT_K={split}, BLOCK_R={block_r}, num_warps={warps},
        **launch)
    {name}_finish[({finish_grid},)](part, out0, M={m}, PARTS={parts}, PARTS_POW2={parts_pow2}, COLS={FINISH_COLS},
        num_warps={finish_warps}, **launch)
'''
    tile = split * block_r
    res = resources(f"{name}_partial", tile, warps, parts, 2, warp_size=warp_size)
    fin = resources(f"{name}_finish", parts_pow2 * FINISH_COLS, finish_warps, finish_grid, 1, warp_size=warp_size)
    if fin["block_elems"] > res["block_elems"]:
        res.update(block_elems=fin["block_elems"], launch=fin["launch"])
    res["regs_per_thread"] = max(res["regs_per_thread"], fin["regs_per_thread"])
    note = (f"split-K GEMV x @ {op}(W, -1) ({m}x{k} @ [{k}x{n} -> {k}], {out_dtype.name}): SPLIT_K={split}, "
            f"BLOCK_R={block_r}, num_warps={warps}; {_count(parts, 'program')} (one per K slice of {split}: its rows "
            f"of W, then the same columns of x), then {_count(finish_grid, 'program')} add {_count(parts, 'fp32 partial')}")
    return GroupKernel(name, part_src + "\n\n" + fin_src + "\n\n" + host, (x, w), (outs[0],), parts,
                       (("SPLIT_K", split), ("BLOCK_R", block_r)), warps, res, note, host=True)
