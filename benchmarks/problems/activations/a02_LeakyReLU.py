"""LeakyReLU with negative slope 0.2 over an fp32 [16381, 12007] matrix (odd sizes, 197M elements)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()
        self.act = nn.LeakyReLU(negative_slope)

    def forward(self, x):
        return self.act(x)


rows = 16381
cols = 12007
negative_slope = 0.2
SMALL_SIZES = {"rows": 5, "cols": 7}


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return [negative_slope]
