"""Inclusive torch.cumsum along the middle dim of fp32 [3001, 4099, 7] (a scan at stride 7)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x, dim=self.dim)


batch_size = 3001
length = 4099
channels = 7
dim = 1
SMALL_SIZES = {"batch_size": 2, "length": 5, "channels": 3}


def get_inputs():
    return [torch.randn(batch_size, length, channels)]


def get_init_inputs():
    return [dim]
