# axon_eg kernel c00_c724a8ce: softmax on h200 (Triton)
# variant 1 (program 0ea761089864, tree cost 2823973420); predicted 65.13 us
# rules with e-nodes in this variant: max_through_sub_rowconst, max_through_sub_rowconst~rev, softmax_drop_max_shift~rev
# fusion plan reduction:
#   g0 reduction nodes [1, 2, 3, 4, 5, 6, 7]: row reduction div/exp/max/sub/sum over 8192 rows x 8192: ROWS=2, BLOCK_N=4096, num_warps=16, 3 chunk loops, 4096 programs

import math  # noqa: F401

import torch
import torch.nn.functional as F  # noqa: F401
import triton
import triton.language as tl

@triton.jit
def _g0_max_sub_exp_sum_div(p0, out0, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)[:, None]
    rmask = rows < 8192
    acc1 = tl.full([ROWS, 1], float("-inf"), tl.float32)
    for c0 in range(0, 8192, BLOCK_N):
        cols = c0 + tl.arange(0, BLOCK_N)[None, :]
        cmask = cols < 8192
        mask = rmask & cmask
        v0 = tl.load(p0 + rows * 8192 + cols, mask=mask, other=1.0).to(tl.float32)
        acc1 = tl.maximum(acc1, tl.max(tl.where(mask, v0, float("-inf")), axis=1)[:, None])
    v1 = acc1
    v3 = ((v1) - (v1))
    acc6 = tl.full([ROWS, 1], 0.0, tl.float32)
    for c0 in range(0, 8192, BLOCK_N):
        cols = c0 + tl.arange(0, BLOCK_N)[None, :]
        cmask = cols < 8192
        mask = rmask & cmask
        v0 = tl.load(p0 + rows * 8192 + cols, mask=mask, other=1.0).to(tl.float32)
        v2 = ((v0) - (v1))
        v4 = ((v2) - (v3))
        v5 = tl.exp(v4)
        acc6 = acc6 + tl.sum(tl.where(mask, v5, 0.0), axis=1)[:, None]
    v6 = acc6
    for c0 in range(0, 8192, BLOCK_N):
        cols = c0 + tl.arange(0, BLOCK_N)[None, :]
        cmask = cols < 8192
        mask = rmask & cmask
        v0 = tl.load(p0 + rows * 8192 + cols, mask=mask, other=1.0).to(tl.float32)
        v2 = ((v0) - (v1))
        v4 = ((v2) - (v3))
        v5 = tl.exp(v4)
        v7 = ((v5) / (v6))
        tl.store(out0 + rows * 8192 + cols, v7, mask=mask)


def kernel(x, out0):
    dev = x.device
    # g0: reduction
    _g0_max_sub_exp_sum_div[(4096,)](x, out0, ROWS=2, BLOCK_N=4096, num_warps=16)
