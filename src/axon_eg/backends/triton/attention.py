"""Attention groups (the expanded ``sdpa``) as one flash-attention Triton kernel; ``attention_match.match``
finds the pattern and the operands' strides (grouped-query heads read in place, nothing copied).

The kernel is the fused-attention tutorial's forward pass: one program per (batch x query head,
``BLOCK_M`` query rows); q stays on chip while ``BLOCK_N`` key/value blocks stream past; the softmax is
computed online in fp32 (running max ``m_i``, running sum ``l_i``, the accumulator rescaled by
``exp(m_i - m_new)``: the rule ``exp_online_rescale``) and divided once at the end
(``div_row_through_matmul_A``). Key blocks wholly past a causal diagonal are skipped, and the query blocks
with the most keys start first; key blocks that need no mask run in a loop without one. Without a mask the
scale goes into the ``exp2`` argument (``qk * c - m``: one FMA per score). ISA ``tl.dot+tma`` loads q, k and v
tiles through tensor descriptors (Hopper). Checked on an H200 with Triton 3.6: GQA (B=4, Hkv=8, G=4, S=2048,
D=128, bf16) at 534 us (~515 TFLOP/s) with BLOCK_M=128, BLOCK_N=64, 4 warps, 2 stages, TMA or not (torch
SDPA: 419 us; ncu: 93.7% SM throughput, 248 registers per thread, 12.5% occupancy); causal MHA (B=4, H=32)
at 386 TFLOP/s with 8 warps, 3 stages (torch: 487).
"""

from __future__ import annotations

import math

from axon_eg.extract.fusion import FusionPlan
from axon_eg.extract.templates import DOT_MIN, Tiling

from .attention_match import _TL_DTYPES, LOG2E, ONLINE_RULES, UNSHIFTED_RULE, Attention, _merged, match  # noqa: F401
from .base import GroupKernel, NotLowerable, cdiv, resources
from .templates import AttentionTile
from .tl_expressions import lit


# -- code -------------------------------------------------------------------------------------------
def _scaled(index: str, stride: int) -> str:
    return "" if stride == 0 else index if stride == 1 else f"{index} * {stride}"


def _tile(base: str, rows: str, row_stride: int, cols: str, col_stride: int) -> str:
    """Pointers to a 2-D tile (a broadcast axis, stride 0, still spans the tile for tl.dot)."""
    r = _scaled(rows, row_stride) or f"{rows} * 0"
    c = _scaled(cols, col_stride) or f"{cols} * 0"
    return f"{base} + {r} + {c}"


def _and(*conds: str) -> str:
    conds = tuple(c for c in conds if c)
    return " & ".join(f"({c})" for c in conds) if len(conds) > 1 else (conds[0] if conds else "")


def _plus(expr: str, k: int) -> str:
    return expr if k == 0 else f"{expr} + {k}" if k > 0 else f"{expr} - {-k}"


def _batch_offset(batch: tuple[int, ...], strides: tuple[int, ...], var: str = "bh") -> str:
    """Offset of slice ``var`` (flat over ``batch``) in a buffer with ``strides`` over the batch dims;
    dims that address memory as one are merged first, so dense heads give ``bh * stride`` and heads
    sharing a buffer give ``(bh // G) * stride``."""
    merged = _merged(list(zip(batch, strides)))
    total = math.prod(batch)
    terms = []
    for i, (n, s) in enumerate(merged):
        inner = math.prod(size for size, _ in merged[i + 1:])
        index = var if inner == 1 else f"({var} // {inner})"
        if n * inner < total:
            index = f"({index} % {n})"
        terms.append(_scaled(index, s))
    return " + ".join(t for t in terms if t) or "0"


class _Emitter:
    def __init__(self, a: Attention, block_m: int, block_n: int, head_d: int, head_dv: int, tma: bool = False):
        self.a = a
        self.row_tail = a.s % block_m != 0
        self.col_tail = a.t % block_n != 0
        self.d_pad = head_d != a.d
        self.dv_pad = head_dv != a.dv
        self.dv_name = "HEAD_DV" if head_dv != head_d or a.dv != a.d else "HEAD_D"
        self.ieee = ', input_precision="ieee"' if a.dtype == "fp32" else ""
        # raw scores, the scale folded into the exp2 argument (one FMA per score): max commutes with a
        # positive scale; masks and finite causal fills are in scaled units, so they keep the scaled form
        self.fma = a.mask is None and a.scale > 0 and (a.causal is None or a.causal[1] == -math.inf)
        self.tma = tma
        if tma:
            self.check_tma()

    def check_tma(self) -> None:
        """Tensor descriptors need whole tiles (no tails, no padded head dims), a contiguous last axis,
        16-byte row pitches and 16-byte aligned slice bases."""
        a = self.a
        item = {"bf16": 2, "fp16": 2, "fp32": 4}[a.dtype]
        why = ("query rows are not a multiple of BLOCK_M" if self.row_tail else
               "keys are not a multiple of BLOCK_N" if self.col_tail else
               "the head dim is padded" if self.d_pad or self.dv_pad else "")
        for role, o in (("q", a.q), ("k", a.k), ("v", a.v)):
            if why:
                break
            if o.cols != 1 or (o.rows * item) % 16 or (o.offset * item) % 16 or any((s * item) % 16 for s in o.batch):
                why = f"{role} is not a dense row-major matrix per slice with 16-byte rows"
        if why:
            raise NotLowerable(f"tl.dot+tma (attention): {why}")

    def descriptors(self) -> list[str]:
        a = self.a
        out = ["# tensor descriptors: the TMA unit copies q, k and v tiles to shared memory in bulk"]
        for role, o, rows, cols, block in (("q", a.q, a.s, a.d, "BLOCK_M, HEAD_D"), ("k", a.k, a.t, a.d, "BLOCK_N, HEAD_D"),
                                           ("v", a.v, a.t, a.dv, f"BLOCK_N, {self.dv_name}")):
            out.append(f"d{role} = tl.make_tensor_descriptor({role}_base, shape=[{rows}, {cols}], strides=[{o.rows}, 1], "
                       f"block_shape=[{block}])")
        return out

    @staticmethod
    def load(ptr: str, *conds: str, cast: bool = False) -> str:
        mask = _and(*conds)
        out = f"tl.load({ptr}, mask={mask}, other=0.0)" if mask else f"tl.load({ptr})"
        return f"{out}.to(tl.float32)" if cast else out

    def block(self, masked: bool) -> list[str]:
        """One key block of the online softmax; ``masked``: the block may cross the causal diagonal or
        the end of the keys."""
        a = self.a
        cols_in = f"cols[:, None] < {a.t}" if masked and self.col_tail else ""
        d_in = f"offs_d[None, :] < {a.d}" if self.d_pad else ""
        dv_in = f"offs_dv[None, :] < {a.dv}" if self.dv_pad else ""
        k_ptr = _tile("k_base", "cols[:, None]", a.k.rows, "offs_d[None, :]", a.k.cols)
        v_ptr = _tile("v_base", "cols[:, None]", a.v.rows, "offs_dv[None, :]", a.v.cols)
        k_load = "dk.load([start_n, 0])" if self.tma else self.load(k_ptr, cols_in, d_in)
        v_load = "dv.load([start_n, 0])" if self.tma else self.load(v_ptr, cols_in, dv_in)
        scale = lit(a.scale * LOG2E)
        lines = ["cols = start_n + offs_n", f"k = {k_load}"]
        if self.fma:
            lines.append(f"qk = tl.dot(q, tl.trans(k){self.ieee})  # raw scores; scale * log2(e) = {scale} goes into exp2")
        else:
            lines.append(f"qk = tl.dot(q, tl.trans(k){self.ieee}) * {scale}  # scale * log2(e): exp2 below")
        if a.mask is not None:
            ptr = " + ".join(t for t in ("mask_base", _scaled("offs_m[:, None]", a.mask.rows),
                                                     _scaled("cols[None, :]", a.mask.cols)) if t)
            rows_in = f"offs_m[:, None] < {a.s}" if self.row_tail else ""
            cols_mask = f"cols[None, :] < {a.t}" if masked and self.col_tail else ""
            lines += [f"bias = {self.load(ptr, rows_in, cols_mask, cast=True)}  # the additive mask",
                      f"qk += bias * {lit(LOG2E)}"]
        if masked and a.causal is not None:
            diagonal, fill = a.causal
            fill_value = 'float("-inf")' if fill == -math.inf else lit(fill * LOG2E)
            lines.append(f"qk = tl.where(cols[None, :] - offs_m[:, None] <= {diagonal}, qk, {fill_value})")
        if masked and self.col_tail:
            lines.append(f'qk = tl.where(cols[None, :] < {a.t}, qk, float("-inf"))')
        row_max = f"tl.max(qk, 1) * {scale}" if self.fma else "tl.max(qk, 1)"
        lines.append(f"m_new = tl.maximum(m_i, {row_max})")
        shift = "m_new"
        if a.mask is not None:  # a row the mask hid so far has m = -inf: shift by 0 (alpha = 0, p = 0) instead of NaN
            lines.append('m_use = tl.where(m_new == float("-inf"), 0.0, m_new)')
            shift = "m_use"
        p_cast = "p" if a.dtype == "fp32" else f"p.to({_TL_DTYPES[a.dtype]})"
        lines += [f"alpha = tl.exp2(m_i - {shift})  # exp_online_rescale: rescales what earlier blocks summed",
                  f"p = tl.exp2(qk * {scale} - {shift}[:, None])" if self.fma else f"p = tl.exp2(qk - {shift}[:, None])",
                  "l_i = l_i * alpha + tl.sum(p, 1)",
                  f"v = {v_load}",
                  f"acc = tl.dot({p_cast}, v, acc * alpha[:, None]{self.ieee})",
                  "m_i = m_new"]
        return lines

    def loops(self) -> list[str]:
        a = self.a
        full = f"{a.t} // BLOCK_N * BLOCK_N"
        if a.causal is None:
            out = [f"for start_n in range(0, {full if self.col_tail else a.t}, BLOCK_N):"]
            out += ["    " + ln for ln in self.block(False)]
            if self.col_tail:
                out.append("# the last, partial key block")
                out.append(f"for start_n in range({full}, {a.t}, BLOCK_N):")
                out += ["    " + ln for ln in self.block(True)]
            return out
        diagonal, fill = a.causal
        if fill == -math.inf:
            out = ["# keys past the diagonal of the block's last row are -inf for every row: skip their blocks",
                   f"hi = tl.minimum({a.t}, tl.maximum(0, {_plus('(start_m + 1) * BLOCK_M', diagonal)}))"]
        else:
            out = [f"hi = {a.t}  # the causal fill {fill} is finite: every key block counts"]
        out += ["# blocks left of the diagonal of the block's first row need no causal mask",
                f"mid = tl.minimum(tl.maximum(0, {_plus('start_m * BLOCK_M', diagonal + 1)}) // BLOCK_N * BLOCK_N, {full})",
                "for start_n in range(0, mid, BLOCK_N):"]
        out += ["    " + ln for ln in self.block(False)]
        out.append("for start_n in range(mid, hi, BLOCK_N):")
        out += ["    " + ln for ln in self.block(True)]
        return out


def _setup(plan: FusionPlan, gi: int, tiling: Tiling | None, isa: str | None) -> tuple[Attention, AttentionTile, _Emitter]:
    """The matched attention, its tile and the emitter's settings; NotLowerable when the group is not an
    attention the kernel computes (``match``), a block is not a power of two >= 16, or TMA does not fit."""
    a = match(plan, gi)
    tile = AttentionTile.read(tiling)
    block_m, block_n = tile.BLOCK_M, tile.BLOCK_N
    for key, v in (("BLOCK_M", block_m), ("BLOCK_N", block_n)):
        if v < DOT_MIN or v & (v - 1):
            raise NotLowerable(f"{key}={v}: tl.dot needs a power of two >= {DOT_MIN}")
    head_d = max(DOT_MIN, 1 << (a.d - 1).bit_length())
    head_dv = max(DOT_MIN, 1 << (a.dv - 1).bit_length())
    return a, tile, _Emitter(a, block_m, block_n, head_d, head_dv, tma=isa == "tl.dot+tma")


def check(plan: FusionPlan, gi: int, tiling: Tiling | None, warp_size: int | None = None,
          isa: str | None = None) -> bool:
    """NotLowerable with :func:`lower`'s reason when it cannot lower the group, else True, without
    generating code (the pattern match, the block sizes, TMA's constraints: ``_setup``)."""
    _setup(plan, gi, tiling, isa)
    return True


def lower(plan: FusionPlan, gi: int, tiling: Tiling | None, name: str, warp_size: int | None = None,
          isa: str | None = None) -> GroupKernel:
    program = plan.program
    a, tile, em = _setup(plan, gi, tiling, isa)
    block_m, block_n, warps, stages = tile.BLOCK_M, tile.BLOCK_N, tile.num_warps, tile.num_stages
    head_d = max(DOT_MIN, 1 << (a.d - 1).bit_length())
    head_dv = max(DOT_MIN, 1 << (a.dv - 1).bit_length())
    operands = [("q", a.q), ("k", a.k), ("v", a.v)] + ([("mask", a.mask)] if a.mask is not None else [])
    reads = tuple(dict.fromkeys(o.node for _, o in operands))
    num_m = cdiv(a.s, block_m)
    grid = num_m * a.heads
    skips = a.causal is not None and a.causal[1] == -math.inf  # later query blocks visit more key blocks
    rule = f"{ONLINE_RULES[0]}, {ONLINE_RULES[1]}" + ("" if a.shifted else f", {UNSHIFTED_RULE}")
    what = f"softmax(q @ k^T * {a.scale:.6g}" + (" + mask" if a.mask is not None else "") + ") @ v"
    if a.causal is not None:
        what += f", causal (key j <= query i + {a.causal[0]}, else {a.causal[1]})"
    body = [f"# flash attention: {what}",
            f"# {a.heads} (batch x head) slices of {a.s} queries x {a.t} keys, head dim {a.d}"
            + (f" (v: {a.dv})" if a.dv != a.d else ""),
            f"# online softmax in fp32 (rules {rule}):",
            "#   exp_online_rescale: exp(m1 - m2) * sum(exp(x - m1)) == sum(exp(x - m2)), so when the running max",
            "#   moves from m_i to m_new the running sum l_i and the accumulator are rescaled by exp(m_i - m_new) <= 1;",
            "#   div_row_through_matmul_A: (p / l) @ v == (p @ v) / l, so the division waits until the end"]
    if not a.shifted:
        body.append("#   softmax_drop_max_shift: the program's exp(x) / sum(exp(x)) equals the max-shifted softmax computed here")
    body += [
            "pid = tl.program_id(0)",
            f"start_m = pid % {num_m}  # the block of BLOCK_M query rows" if not skips else
            f"start_m = {num_m - 1} - pid % {num_m}  # the block of BLOCK_M query rows, the heaviest (most keys) first",
            f"bh = pid // {num_m}  # the (batch x query head) slice"]
    if a.group > 1:
        body.append(f"# k and v are read in place: {a.group} query heads share each key/value head (grouped-query attention)")
    for role, o in operands:
        offset = _batch_offset(a.batch, o.batch)
        body.append(f"{role}_base = p{o.node}" + (f" + {o.offset}" if o.offset else "")
                    + ("" if offset == "0" else f" + {offset}"))
    body += ["offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)", "offs_n = tl.arange(0, BLOCK_N)",
             "offs_d = tl.arange(0, HEAD_D)"]
    if em.dv_name != "HEAD_D":
        body.append(f"offs_dv = tl.arange(0, {em.dv_name})")
    else:
        body.append("offs_dv = offs_d")
    rows_in = f"offs_m[:, None] < {a.s}" if em.row_tail else ""
    q_ptr = _tile("q_base", "offs_m[:, None]", a.q.rows, "offs_d[None, :]", a.q.cols)
    if em.tma:
        body += em.descriptors()
    d_in = f"offs_d[None, :] < {a.d}" if em.d_pad else ""
    q_load = "dq.load([start_m * BLOCK_M, 0])" if em.tma else em.load(q_ptr, rows_in, d_in)
    body += ["# q stays on chip for the whole loop over the keys",
             f"q = {q_load}",
             'm_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running row max (log2 units)',
             "l_i = tl.zeros([BLOCK_M], tl.float32)  # running row sum of exp2(qk - m_i)",
             f"acc = tl.zeros([BLOCK_M, {em.dv_name}], tl.float32)"]
    body += em.loops()
    out_ptr = _tile(f"out0 + bh * {a.s * a.dv}" if a.heads > 1 else "out0", "offs_m[:, None]", a.dv, "offs_dv[None, :]", 1)
    store_mask = _and(rows_in, f"offs_dv[None, :] < {a.dv}" if em.dv_pad else "")
    body += ["acc = acc / l_i[:, None]",
             f"tl.store({out_ptr}, acc" + (f", mask={store_mask})" if store_mask else ")")]
    constexprs = [("BLOCK_M", block_m), ("BLOCK_N", block_n), ("HEAD_D", head_d)]
    if em.dv_name != "HEAD_D":
        constexprs.append(("HEAD_DV", head_dv))
    params = [f"p{n}" for n in reads] + ["out0"] + [f"{c}: tl.constexpr" for c, _ in constexprs]
    src = "@triton.jit\ndef {}({}):\n{}\n".format(name, ", ".join(params), "\n".join("    " + ln for ln in body))
    # shared memory: the q tile, num_stages buffers of k and v tiles, one score tile of scratch for layout
    # conversions; registers: the fp32 score tile (p reuses it) and the fp32 accumulator
    item = program.nodes[a.q.node].dtype.itemsize
    smem = item * (block_m * head_d + stages * block_n * (head_d + head_dv) + block_m * block_n)
    largest = max(block_m * block_n, block_m * head_dv, block_n * head_d)
    res = resources(name, largest, warps, grid, 1, smem_bytes=smem, warp_size=warp_size)
    res["regs_per_thread"] = math.ceil((block_m * block_n + block_m * head_dv) / res["threads"])
    heads = f"{a.heads} heads" + (f" ({a.group} query heads per kv head)" if a.group > 1 else "")
    flags = (", causal" if a.causal else "") + (", additive mask" if a.mask is not None else "")
    note = (f"flash attention over {heads}, {a.s} queries x {a.t} keys, head dim {a.d}{flags}: BLOCK_M={block_m}, "
            f"BLOCK_N={block_n}, HEAD_D={head_d}, num_warps={warps}, num_stages={stages}, {grid} programs"
            + (", q/k/v tiles by TMA; " if em.tma else "; ") + f"online softmax by {rule}")
    return GroupKernel(name, src, reads, (plan.outputs_of(gi)[0],), grid, tuple(constexprs), warps,
                       res, note, (("num_stages", stages),))
