"""Exclusive cumsum along the middle dim of fp32 [1024, 2053, 47] (zero-prepend, narrow)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        shifted = torch.cat((torch.zeros_like(x.select(self.dim, 0).unsqueeze(self.dim)), x), dim=self.dim)
        return torch.cumsum(shifted.narrow(self.dim, 0, x.size(self.dim)), dim=self.dim)


batch_size = 1024
length = 2053
channels = 47
dim = 1
SMALL_SIZES = {"batch_size": 2, "length": 5, "channels": 3}


def get_inputs():
    return [torch.randn(batch_size, length, channels)]


def get_init_inputs():
    return [dim]
