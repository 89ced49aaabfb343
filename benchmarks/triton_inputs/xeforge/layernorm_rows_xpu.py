# A row LayerNorm written for an Intel GPU (Xe-Forge form): its own fp16 gamma and beta, statistics in fp32.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_kernel(x_ptr, g_ptr, b_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    d = tl.where(mask, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / n_cols
    g = tl.load(g_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = d * tl.rsqrt(var + eps) * g + b
    tl.store(out_ptr + row * n_cols + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.gamma = nn.Parameter(torch.randn(hidden, dtype=torch.float16, device="xpu"))
        self.beta = nn.Parameter(torch.randn(hidden, dtype=torch.float16, device="xpu"))
        self.eps = 1e-5

    def forward(self, x):
        rows, cols = x.shape
        out = torch.empty_like(x, device="xpu")
        layernorm_kernel[(rows,)](x, self.gamma, self.beta, out, cols, self.eps, BLOCK=triton.next_power_of_2(cols),
                                  num_warps=4, grf_mode="default")
        return out
