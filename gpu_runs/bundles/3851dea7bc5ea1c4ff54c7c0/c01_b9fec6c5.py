# axon_eg kernel c01_b9fec6c5: silu on h200 (Triton)
# variant 0 (program a90a31ea7693, tree cost 268800180); predicted 65.13 us
# rules with e-nodes in this variant: none (the program as written)
# fusion plan elementwise:
#   g0 elementwise nodes [1]: element-wise silu over [8192, 8192]: BLOCK=2048, num_warps=4, 32768 programs

import math  # noqa: F401

import torch
import torch.nn.functional as F  # noqa: F401
import triton
import triton.language as tl

@triton.jit
def _g0_silu(p0, out0, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < 67108864
    i0 = (offs // 8192)
    i1 = (offs % 8192)
    v0 = tl.load(p0 + offs, mask=mask, other=1.0).to(tl.float32)
    v1 = ((v0) * tl.where((v0) >= 0.0, 1.0 / (1.0 + tl.exp(-tl.abs(v0))), tl.exp(-tl.abs(v0)) / (1.0 + tl.exp(-tl.abs(v0)))))
    tl.store(out0 + offs, v1, mask=mask)


def kernel(x, out0):
    dev = x.device
    # g0: elementwise
    _g0_silu[(32768,)](x, out0, BLOCK=2048, num_warps=4)
