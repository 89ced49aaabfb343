"""Inclusive torch.cumsum along dim 1 of fp32 [8191, 32768]: KernelBench 89_cumsum, 32768 rows cut to 8191."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x, dim=self.dim)


batch_size = 8191
length = 32768
dim = 1
SMALL_SIZES = {"batch_size": 3, "length": 7}


def get_inputs():
    return [torch.rand(batch_size, length)]


def get_init_inputs():
    return [dim]
