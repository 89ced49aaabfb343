"""A 4-D fp32 torch.matmul broadcasting a 3-D batch: (16, 12, 512, 512) @ (12, 512, 512), B shared across the outer dim."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


outer = 16
heads = 12
m = 512
k = 512
n = 512
SMALL_SIZES = {"outer": 3, "heads": 2, "m": 7, "k": 5, "n": 1}


def get_inputs():
    return [torch.randn(outer, heads, m, k), torch.randn(heads, k, n)]


def get_init_inputs():
    return []
