"""Row variance with float64 accumulators (a guard against cancellation that costs fp64 work): one row per
program, a chunk loop of sums and sums of squares."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

ROWS, COLS = 8192, 4096
SMALL_SIZES = {"ROWS": 7, "COLS": 301}


@triton.jit
def rowvar_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float64)
    acc2 = tl.zeros((BLOCK,), dtype=tl.float64)
    for c0 in range(0, n_cols, BLOCK):
        offs = c0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=0.0).to(tl.float64)
        acc += x
        acc2 += x * x
    mean = tl.sum(acc, axis=0) / n_cols
    var = tl.sum(acc2, axis=0) / n_cols - mean * mean
    tl.store(y_ptr + row, var.to(tl.float32))


class Model(nn.Module):
    def forward(self, x):
        return torch.var(x, dim=-1, unbiased=False)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
        rowvar_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=256)
        return y


def get_inputs():
    return [torch.randn(ROWS, COLS) * 3.0 + 0.5]


def get_init_inputs():
    return []
