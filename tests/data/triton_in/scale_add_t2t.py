"""Triton-to-Triton form: Model launches the kernel; the reference and inputs are given apart."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_add_kernel(x_ptr, b_ptr, y_ptr, n, n_cols, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs % n_cols, mask=mask)
    tl.store(y_ptr + offs, x * 2.0 + b, mask=mask)


class Model(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(cols))

    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        scale_add_kernel[(triton.cdiv(n, 256),)](x, self.bias, y, n, x.shape[-1], BLOCK=256)
        return y
