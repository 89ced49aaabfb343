"""A convolution through the library on channels-last operands (ISA choice ``library+nhwc``).

cuDNN runs a 2-d / 3-d convolution on NHWC (NDHWC) tensors much faster than on NCHW ones: measured on the
H200 (fp32 on TF32 tensor cores, torch's default; ``benchmarks/conv_layout_bench.py``), the corpus' v03
772.6 us in NCHW against 467.4 us with the input already channels-last, v04 596.4 / 293.8, v08 576.7 /
271.1. A transposed convolution alike: on NCHW tensors cuDNN converts inside the call (v11 on an H100,
``benchmarks/results/2026-12-05-issue18-h100-spot/profiles.txt``: its NHWC kernel 342.3 us between
conversions of 185.4 us in and 181.7 us out). torch's own layout copies eat the gain
(``x.contiguous(memory_format=torch.channels_last)`` 188 us for v03's input, the output back 515 us), so both
conversions are our tiled transposes
(:data:`TRANSPOSE`: loads along the source's contiguous axis, ``tl.trans`` through shared memory, stores
along the destination's):

* the input ``[N, C, *S]`` (row-major) is copied to ``[N, *S, C]`` and passed to the library as its
  channels-last view; the weight goes through ``contiguous(memory_format=...)`` (it is small), once while it
  stays the same where it is an input of the program (:data:`WEIGHT_CACHE`);
* where the input is the element-wise epilogue of another such conv, read by nothing else (``Call.chained``),
  that epilogue stores it channels-last (``layout.lower_physical``: no transpose on either side);
* the library's output is channels-last; where the group's element-wise epilogue reads it
  (``Call.keep``), the epilogue is a tiled transpose itself (``layout.lower(..., stored=...)``: it loads
  along the channels and stores the NCHW output along its innermost axis), else one more tiled transpose
  writes it row-major.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from axon_eg.extract.fusion import LIBRARY, FusionPlan, node_kind
from axon_eg.ir import ops as O
from axon_eg.ir.library_ops import CONV_FAMILIES
from axon_eg.ir.program import Program

from .base import INT32_LIMIT, cdiv

TILE = 64
"""The transposes' square tile (64 x 64: 3.7-3.9 TB/s on the H200, ``layout.COPY_TILE``)."""
NAME = "_nhwc_transpose"
MAX_GRID_YZ = 65535  # CUDA's limit on a grid's second and third dims

TRANSPOSE = f'''@triton.jit
def {NAME}(src, dst, R, C, WIDE: tl.constexpr):
    # dst[b, c, r] = src[b, r, c] for row-major [B, R, C] -> [B, C, R]: one {TILE} x {TILE} tile per program
    b = tl.program_id(2)
    r = (tl.program_id(0) * {TILE} + tl.arange(0, {TILE}))[:, None]
    c = (tl.program_id(1) * {TILE} + tl.arange(0, {TILE}))[None, :]
    if WIDE:  # 64-bit offsets where a tensor has 2**31 elements or more
        b, r, c = b.to(tl.int64), r.to(tl.int64), c.to(tl.int64)
    mask = (r < R) & (c < C)
    x = tl.load(src + b * R * C + r * C + c, mask=mask)
    tl.store(dst + b * R * C + tl.trans(c) * R + tl.trans(r), tl.trans(x), mask=tl.trans(mask))
'''

WEIGHT = "_channels_last_weight"
WEIGHT_CACHE = f'''_CHANNELS_LAST = {{}}


def {WEIGHT}(w, memory_format):
    # the weight's channels-last copy, made again only when the weight changed (its storage, shape or version
    # counter: an in-place update bumps it); an inference tensor has no version counter, so it is copied each call
    if w.is_inference():
        return w.contiguous(memory_format=memory_format)
    key = (w.data_ptr(), w._version, tuple(w.shape), w.dtype, w.device, memory_format)
    hit = _CHANNELS_LAST.get(id(w))
    if hit is None or hit[0] != key:
        hit = _CHANNELS_LAST[id(w)] = (key, w.contiguous(memory_format=memory_format))
    return hit[1]
'''
"""The launcher's copy of a conv weight that is an input of the program (a parameter): made once, not on
every call (a 3x3 conv's weight copy is a launch of its own, ~5 us, beside a conv of 50-150 us)."""


@dataclass(frozen=True)
class Call:
    """The convolution ``conv`` of a library group on channels-last operands."""

    conv: int
    rank: int  # spatial dims: 2 or 3
    keep: bool  # the output stays channels-last (an epilogue reads it as such), else it is transposed back
    chained: bool = False  # the input is already stored channels-last (the previous conv's epilogue wrote it so)


def permutation(rank: int) -> tuple[int, ...]:
    """The physical order of a channels-last tensor's logical axes (N, C, *spatial): N, the spatial ones, C."""
    return (0, *range(2, 2 + rank), 1)


def core(plan: FusionPlan, gi: int) -> int | None:
    """The conv node of library group ``gi`` when the library can run it on channels-last operands: one
    2-d or 3-d convolution or transposed convolution of an fp32 input (the rate the hardware file measured), with
    nothing of the group computed before it (its operands come from HBM as they are), whose transposes'
    grids fit (at most ``MAX_GRID_YZ`` images and tiles of the columns)."""
    program = plan.program
    g = plan.groups[gi]
    libs = [n for n in g.nodes if node_kind(program.nodes[n].op) == LIBRARY]
    if g.kind != LIBRARY or len(libs) != 1:
        return None
    node = program.nodes[libs[0]]
    meta = O.get(node.op).meta
    if meta.get("shape_family") not in CONV_FAMILIES or meta.get("spatial") not in (2, 3):
        return None
    if program.nodes[node.inputs[0]].dtype.name != "fp32" or plan.feeding(gi, libs[0]):
        return None
    shape = tuple(program.concrete_shape(node.inputs[0]))
    out = tuple(program.concrete_shape(libs[0]))
    if max(shape[0], cdiv(math.prod(shape[2:]), TILE), cdiv(out[1], TILE)) > MAX_GRID_YZ:
        return None
    return libs[0]


def _memory_format(rank: int) -> str:
    return "torch.channels_last" if rank == 2 else "torch.channels_last_3d"


def _launch(src: str, dst: str, batch: int, rows: int, cols: int) -> str:
    wide = batch * rows * cols >= INT32_LIMIT
    grid = (cdiv(rows, TILE), cdiv(cols, TILE), batch)
    return f"    {NAME}[{grid}]({src}, {dst}, {rows}, {cols}, WIDE={wide})"


def source(program: Program, call: Call, args: list[str], conv_expr, out: str | None) -> tuple[list[str], str]:
    """The launcher lines of the group: the input transposed to channels-last, the library call on it, and
    (unless ``call.keep``) the output transposed back into ``out`` (a buffer of the output's shape, or None
    for a fresh one). ``conv_expr(args)`` is the torch expression of the conv on argument expressions.
    Returns the lines and the name of the tensor holding the result."""
    x = program.nodes[call.conv].inputs[0]
    shape = tuple(program.concrete_shape(x))
    n, c, spatial = shape[0], shape[1], math.prod(shape[2:])
    dt = program.nodes[x].dtype.torch_name
    t = f"t{call.conv}"
    physical = (n, *shape[2:], c)
    if call.chained:  # written channels-last by the epilogue before: its buffer viewed in that order
        lines = [f"    {t}_x = {args[0]}.view({physical})"]
    else:
        lines = [f"    {t}_x = torch.empty({physical}, dtype=torch.{dt}, device=dev)",
                 _launch(args[0], f"{t}_x", n, c, spatial)]
    order = permutation(call.rank)
    perm = tuple(order.index(a) for a in range(len(order)))  # [N, *S, C] viewed as the logical [N, C, *S]
    fmt = _memory_format(call.rank)
    weight = f"{WEIGHT}({args[1]}, {fmt})" if program.nodes[program.nodes[call.conv].inputs[1]].is_input \
        else f"{args[1]}.contiguous(memory_format={fmt})"
    conv_args = [f"{t}_x.permute{perm}", weight, *args[2:]]
    # channels-last, as the library returns it (contiguous() makes sure, a no-op then: with size-1 dims, or on
    # another device, torch may pick the row-major layout)
    lines.append(f"    {t}_cl = ({conv_expr(conv_args)}).contiguous(memory_format={_memory_format(call.rank)})")
    if call.keep:
        return lines, f"{t}_cl"
    oshape = tuple(program.concrete_shape(call.conv))
    odt = program.nodes[call.conv].dtype.torch_name
    dst = out or t
    if out is None:
        lines.append(f"    {t} = torch.empty({oshape}, dtype=torch.{odt}, device=dev)")
    lines.append(_launch(f"{t}_cl", dst, oshape[0], math.prod(oshape[2:]), oshape[1]))
    return lines, dst


def describe(call: Call) -> str:
    source = "the input as the previous epilogue stored it" if call.chained else "our tiled transpose of the input"
    return (f"library conv on channels-last operands ({source}; the output "
            f"{'read channels-last by the epilogue' if call.keep else 'transposed back'})")
