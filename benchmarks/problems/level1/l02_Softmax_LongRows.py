"""torch.softmax over dim 1 of fp32 [53, 1048573]: a few rows of 1M values (odd)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


batch_size = 53
dim = 1048573
SMALL_SIZES = {"batch_size": 2, "dim": 9}


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
