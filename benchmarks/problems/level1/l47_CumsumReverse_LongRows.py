"""Reverse cumsum (flip, cumsum, flip) along dim 1 of fp32 [9, 12000007]."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x.flip(self.dim), dim=self.dim).flip(self.dim)


batch_size = 9
length = 12000007
dim = 1
SMALL_SIZES = {"batch_size": 3, "length": 7}


def get_inputs():
    return [torch.randn(batch_size, length)]


def get_init_inputs():
    return [dim]
