# A bias, tanh-GELU and residual add written for an Intel GPU (Xe-Forge form): two inputs, an fp16 bias.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_gelu_residual_kernel(x_ptr, r_ptr, b_ptr, out_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs % cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    h = x + b
    inner = 0.7978845608028654 * (h + 0.044715 * h * h * h)
    t = 2.0 * tl.sigmoid(2.0 * inner) - 1.0
    y = 0.5 * h * (1.0 + t) + r
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


class Model(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(cols, dtype=torch.float16).to("xpu"))

    def forward(self, x, residual):
        out = torch.empty_like(x)
        n = x.numel()
        bias_gelu_residual_kernel[(triton.cdiv(n, 1024),)](x, residual, self.bias, out, n, x.shape[-1], BLOCK=1024,
                                                           num_warps=8, threads_per_warp=16)
        return out
