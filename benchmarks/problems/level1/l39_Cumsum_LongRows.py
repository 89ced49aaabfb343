"""Inclusive torch.cumsum along dim 1 of fp32 [11, 10000019]: 11 scans of 10M values."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x, dim=self.dim)


batch_size = 11
length = 10000019
dim = 1
SMALL_SIZES = {"batch_size": 3, "length": 7}


def get_inputs():
    return [torch.randn(batch_size, length)]


def get_init_inputs():
    return [dim]
