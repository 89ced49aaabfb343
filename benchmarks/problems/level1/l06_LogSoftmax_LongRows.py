"""torch.log_softmax over dim 1 of fp32 [67, 786431]: a few rows of 786K values."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.log_softmax(x, dim=1)


batch_size = 67
dim = 786431
SMALL_SIZES = {"batch_size": 2, "dim": 9}


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
