"""Hopper tensor-memory-accelerator loads for matmul operand tiles (ISA choice ``tl.dot+tma``).

The matmul lowering writes every operand load as pointer arithmetic over index tokens. A load of a whole
dense 2-D buffer tile, ``tl.load(p3 + rm * 4096 + rk)`` (A), ``tl.load(p3 + rk * 4096 + rm)`` (A stored
transposed), ``tl.load(p3 + rkb * 4096 + rn)`` (B) or ``tl.load(p3 + rn * 4096 + rkb)`` (B stored
transposed, as a torch ``linear`` weight), becomes a load through a tensor descriptor made once per
program (``tl.make_tensor_descriptor``): one bulk copy per tile by the TMA unit instead of per-thread
address arithmetic. Out-of-range rows and columns come back as zeros, so a load masked along its own
tails with ``other=0.0`` (``mask=mmask & kmask``: a size no block divides, or a run-time one) is the same
descriptor load. Loads that do not have this form (prologue values, which fill masked lanes with 1.0,
broadcast or batched operands) are left as they are. Descriptors made on the
device need global scratch memory, which the kernel file provides with ``triton.set_allocator``.
"""

from __future__ import annotations

import re

from .base import NotLowerable

ALLOCATOR = '''def _tma_scratch(size: int, alignment: int, stream):
    """Global scratch for tensor descriptors made on the device (tl.make_tensor_descriptor)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


triton.set_allocator(_tma_scratch)
'''
"""Module-level code of a kernel file whose kernels make tensor descriptors."""

_LOAD = re.compile(r"tl\.load\(p(\d+) \+ (rm|rk|rkb|rn) \* (\d+) \+ (rm|rk|rkb|rn)"
                   r"(?:, mask=(?:[mnk]mask(?:_b)?)(?: & [mnk]mask(?:_b)?)*, other=0\.0)?\)")
# (outer token, inner token) -> (role, block shape, offsets, transpose after the load)
_FORMS = {
    ("rm", "rk"): ("BLOCK_M", "BLOCK_K", "{m}", "k0", False),
    ("rk", "rm"): ("BLOCK_K", "BLOCK_M", "k0", "{m}", True),
    ("rkb", "rn"): ("BLOCK_K", "BLOCK_N", "k0", "{n}", False),
    ("rn", "rkb"): ("BLOCK_N", "BLOCK_K", "{n}", "k0", True),
}


NO_DENSE_LOAD = "tl.dot+tma: no operand tile is a dense 2-D row-major buffer load"


def _form(outer: str, inner: str, shape: tuple[int, ...] | None, stride: int, itemsize: int) -> tuple | None:
    """The descriptor form of a load ``p + outer * stride + inner`` of a buffer of ``shape``, or None when
    it is not a whole dense row-major 2-D tile (or its row pitch is no multiple of 16 bytes)."""
    form = _FORMS.get((outer, inner))
    if form is None or shape is None or len(shape) != 2 or shape[1] != stride:
        return None
    if (stride * itemsize) % 16:  # TMA: row pitch a multiple of 16 bytes
        return None
    return form


def dense(idx: tuple[str, ...], shape: tuple[int, ...], itemsize: int) -> bool:
    """Whether the matmul lowering's operand load of a buffer of ``shape`` at ``idx`` (``_Kernel._load``:
    the address joins ``token * stride`` over the dims of size above 1; masked along its own tails, other
    0.0) is one :func:`rewrite` turns into a descriptor load: a 2-D buffer with both dims above 1 indexed
    by one token each (address ``outer * shape[1] + inner``) of a form in ``_FORMS``."""
    if len(shape) != 2 or len(idx) != 2 or 1 in shape:
        return False
    return _form(idx[0], idx[1], shape, shape[1], itemsize) is not None


def coordinates_fit(wide: bool) -> None:
    """NotLowerable when the kernel indexes a buffer over 2^31 elements (``wide``): TMA takes 32-bit
    coordinates. The first thing :func:`rewrite` decides, and decided without the kernel body."""
    if wide:
        raise NotLowerable("tl.dot+tma: 64-bit indexing (a buffer over 2^31 elements); TMA takes 32-bit coordinates")


def rewrite(body: list[str], shapes: dict[int, tuple[int, ...]], itemsize: dict[int, int], looped: bool,
            wide: bool) -> list[str]:
    """``body`` with dense operand tile loads through tensor descriptors; NotLowerable when none fits.
    ``shapes`` / ``itemsize``: of the buffers ``p<n>``; ``looped``: N tiles are a loop (offset ``n0``)."""
    coordinates_fit(wide)
    offsets = {"m": "pid_m * BLOCK_M", "n": "n0" if looped else "pid_n * BLOCK_N"}
    made: dict[tuple[int, str, str], str] = {}

    def swap(match: re.Match[str]) -> str:
        n, outer, stride, inner = int(match[1]), match[2], int(match[3]), match[4]
        shape = shapes.get(n)
        form = _form(outer, inner, shape, stride, itemsize[n]) if shape is not None else None
        if form is None:
            return match[0]
        rows_block, cols_block, row_off, col_off, trans = form
        key = (n, rows_block, cols_block)
        if key not in made:
            made[key] = f"d{n}_{len(made)}"
        load = f"{made[key]}.load([{row_off.format(**offsets)}, {col_off.format(**offsets)}])"
        return f"tl.trans({load})" if trans else load

    out = [_LOAD.sub(swap, line) for line in body]
    if not made:
        raise NotLowerable(NO_DENSE_LOAD)
    decls = ["# tensor descriptors: the TMA unit copies each operand tile to shared memory in one bulk transfer"]
    for (n, rows_block, cols_block), name in made.items():
        r, c = shapes[n]
        decls.append(f"{name} = tl.make_tensor_descriptor(p{n}, shape=[{r}, {c}], strides=[{c}, 1], "
                     f"block_shape=[{rows_block}, {cols_block}])")
    at = next(i for i, line in enumerate(out) if line.startswith("rm = "))
    return out[:at] + decls + out[at:]
