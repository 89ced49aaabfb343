"""Reverse cumsum (flip, cumsum, flip) along the middle dim of fp32 [769, 4001, 33]."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x.flip(self.dim), dim=self.dim).flip(self.dim)


batch_size = 769
length = 4001
channels = 33
dim = 1
SMALL_SIZES = {"batch_size": 2, "length": 5, "channels": 3}


def get_inputs():
    return [torch.randn(batch_size, length, channels)]


def get_init_inputs():
    return [dim]
