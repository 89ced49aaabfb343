"""Column sums: one column per program, walking down the rows (strided, uncoalesced loads)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

ROWS, COLS = 8192, 4096
SMALL_SIZES = {"ROWS": 70, "COLS": 13}


@triton.jit
def colsum_kernel(x_ptr, y_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    col = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for r0 in range(0, n_rows, BLOCK):
        rows = r0 + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + rows * n_cols + col, mask=rows < n_rows, other=0.0)
    tl.store(y_ptr + col, tl.sum(acc, axis=0))


class Model(nn.Module):
    def forward(self, x):
        return x.sum(dim=0)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty(x.shape[1], device=x.device, dtype=x.dtype)
        colsum_kernel[(x.shape[1],)](x, y, x.shape[0], x.shape[1], BLOCK=64)
        return y


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
