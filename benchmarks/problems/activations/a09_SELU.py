"""SELU over an fp32 [8191, 24577] matrix (201M elements)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.selu(x)


rows = 8191
cols = 24577
SMALL_SIZES = {"rows": 1, "cols": 7}


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
