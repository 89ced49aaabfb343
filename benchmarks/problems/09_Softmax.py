"""Softmax over the last dimension of long rows."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=-1)


batch_size = 128
dim = 16384
SMALL_SIZES = {"batch_size": 4, "dim": 37}


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
