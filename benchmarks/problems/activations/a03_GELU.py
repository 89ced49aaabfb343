"""Exact (erf) GELU over fp32 transformer activations [16, 2047, 6144] (201M elements)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x)


batch_size = 16
seq_len = 2047
hidden = 6144
SMALL_SIZES = {"batch_size": 1, "seq_len": 3, "hidden": 5}


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return []
