"""torch.cumsum(x * mask, dim=1) of fp32 [6553, 32768] and a bool mask: 93_masked_cumsum, rows cut to 6553."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x, mask):
        return torch.cumsum(x * mask, dim=self.dim)


batch_size = 6553
length = 32768
dim = 1
SMALL_SIZES = {"batch_size": 3, "length": 7}


def get_inputs():
    x = torch.rand(batch_size, length)
    mask = torch.randint(0, 2, (batch_size, length)).bool()
    return [x, mask]


def get_init_inputs():
    return [dim]
