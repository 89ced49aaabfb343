# axon_eg kernel c07_cd5a2282: softmax on h200 (Triton)
# variant 6 (program 304d46ff15c5, tree cost 4707459782); predicted 65.13 us
# rules with e-nodes in this variant: max_through_sub_rowconst, max_through_sub_rowconst~rev, softmax_drop_max_shift~rev
# fusion plan reduction:
#   g0 reduction nodes [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]: row reduction div/exp/max/sub/sum over 8192 rows x 8192: ROWS=2, BLOCK_N=8192, num_warps=16, one pass, 4096 programs

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
    cols = tl.arange(0, BLOCK_N)[None, :]
    cmask = cols < 8192
    mask = rmask & cmask
    v0 = tl.load(p0 + rows * 8192 + cols, mask=mask, other=1.0).to(tl.float32)
    acc1 = tl.max(tl.where(mask, v0, float("-inf")), axis=1)[:, None]
    v1 = acc1
    v2 = ((v0) - (v1))
    acc3 = tl.max(tl.where(mask, v2, float("-inf")), axis=1)[:, None]
    v3 = acc3
    v4 = ((v2) - (v3))
    v5 = ((v1) - (v1))
    v6 = ((v5) - (v5))
    v7 = ((v4) - (v6))
    v8 = tl.exp(v7)
    v9 = ((v2) - (v5))
    v10 = ((v9) - (v6))
    v11 = tl.exp(v10)
    acc12 = tl.sum(tl.where(mask, v11, 0.0), axis=1)[:, None]
    v12 = acc12
    v13 = ((v8) / (v12))
    tl.store(out0 + rows * 8192 + cols, v13, mask=mask)


def kernel(x, out0):
    dev = x.device
    # g0: reduction
    _g0_max_sub_exp_sum_div[(4096,)](x, out0, ROWS=2, BLOCK_N=8192, num_warps=16)
