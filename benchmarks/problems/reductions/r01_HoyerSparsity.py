"""Hoyer sparsity of a whole fp32 [12007, 16661] matrix: a scalar from its L1 sum and its Frobenius norm."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        root_n = x.numel() ** 0.5
        l1 = x.abs().sum()
        l2 = torch.norm(x, p="fro")
        return (root_n - l1 / l2) / (root_n - 1.0)


rows = 12007
cols = 16661
SMALL_SIZES = {"rows": 5, "cols": 7}


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
