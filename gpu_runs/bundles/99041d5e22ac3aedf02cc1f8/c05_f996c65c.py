# axon_eg kernel c05_f996c65c: rmsnorm on h200 (Triton)
# variant 2 (program 2a3710d1ed97, tree cost 941097772); predicted 65.13 us
# rules with e-nodes in this variant: add_swap, add_swap~rev, mean_through_add_scalar>0, mean_through_add_scalar>0~rev, mul_into_mul, mul_into_mul~rev, mul_swap, mul_swap~rev
# fusion plan reduction:
#   g0 reduction nodes [2, 3, 5, 6, 7, 8]: row reduction add/mean/mul/rsqrt/square over 8192 rows x 8192: ROWS=1, BLOCK_N=4096, num_warps=16, 2 chunk loops, 8192 programs

import math  # noqa: F401

import torch
import torch.nn.functional as F  # noqa: F401
import triton
import triton.language as tl

@triton.jit
def _g0_square_mean_add_rsqrt_mul(p0, p1, out0, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)[:, None]
    rmask = rows < 8192
    acc3 = tl.full([ROWS, 1], 0.0, tl.float32)
    for c0 in range(0, 8192, BLOCK_N):
        cols = c0 + tl.arange(0, BLOCK_N)[None, :]
        cmask = cols < 8192
        mask = rmask & cmask
        v0 = tl.load(p0 + rows * 8192 + cols, mask=mask, other=1.0).to(tl.float32)
        v2 = ((v0) * (v0))
        acc3 = acc3 + tl.sum(tl.where(mask, v2, 0.0), axis=1)[:, None]
    v3 = acc3 * 0.0001220703125
    v5 = ((v3) + (1e-06))
    v6 = tl.rsqrt(v5)
    for c0 in range(0, 8192, BLOCK_N):
        cols = c0 + tl.arange(0, BLOCK_N)[None, :]
        cmask = cols < 8192
        mask = rmask & cmask
        v0 = tl.load(p0 + rows * 8192 + cols, mask=mask, other=1.0).to(tl.float32)
        v1 = tl.load(p1 + cols, mask=cmask, other=1.0).to(tl.float32)
        v7 = ((v6) * (v1))
        v8 = ((v0) * (v7))
        tl.store(out0 + rows * 8192 + cols, v8, mask=mask)


def kernel(x, w, out0):
    dev = x.device
    # g0: reduction
    _g0_square_mean_add_rsqrt_mul[(8192,)](x, w, out0, ROWS=1, BLOCK_N=4096, num_warps=16)
