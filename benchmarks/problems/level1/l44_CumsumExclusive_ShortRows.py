"""Exclusive cumsum (zero-prepend, narrow, cumsum) along dim 1 of fp32 [4000037, 23]."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        shifted = torch.cat((torch.zeros_like(x.select(self.dim, 0).unsqueeze(self.dim)), x), dim=self.dim)
        return torch.cumsum(shifted.narrow(self.dim, 0, x.size(self.dim)), dim=self.dim)


batch_size = 4000037
length = 23
dim = 1
SMALL_SIZES = {"batch_size": 3, "length": 7}


def get_inputs():
    return [torch.randn(batch_size, length)]


def get_init_inputs():
    return [dim]
