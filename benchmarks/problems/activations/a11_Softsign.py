"""Softsign x / (1 + |x|) over fp32 [24, 3001, 2731] activations (197M elements)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.softsign(x)


batch_size = 24
seq_len = 3001
hidden = 2731
SMALL_SIZES = {"batch_size": 3, "seq_len": 1, "hidden": 5}


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return []
