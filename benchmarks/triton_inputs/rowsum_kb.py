"""Row sums: one row per program, a chunk loop with a scalar accumulator."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

ROWS, COLS = 16384, 4096
SMALL_SIZES = {"ROWS": 9, "COLS": 500}


@triton.jit
def rowsum_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    total = 0.0
    for c0 in range(0, n_cols, BLOCK):
        offs = c0 + tl.arange(0, BLOCK)
        total += tl.sum(tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=0.0), axis=0)
    tl.store(y_ptr + row, total)


class Model(nn.Module):
    def forward(self, x):
        return x.sum(dim=-1)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
        rowsum_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=128)
        return y


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
