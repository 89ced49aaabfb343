"""torch.softmax over dim 1 of fp32 [5000011, 19]: 5M short rows of 19 values."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


batch_size = 5000011
dim = 19
SMALL_SIZES = {"batch_size": 5, "dim": 3}


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
