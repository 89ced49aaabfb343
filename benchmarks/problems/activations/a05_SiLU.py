"""SiLU (swish) over fp32 [64, 1023, 3001] activations (196M elements)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.silu(x)


batch_size = 64
seq_len = 1023
hidden = 3001
SMALL_SIZES = {"batch_size": 2, "seq_len": 3, "hidden": 7}


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return []
