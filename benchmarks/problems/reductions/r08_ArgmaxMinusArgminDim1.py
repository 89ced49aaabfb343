"""Offset from the trough to the peak index along dim 1 (argmax - argmin) of an fp32 [512, 997, 383] tensor (int64 out)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.argmax(x, dim=1) - torch.argmin(x, dim=1)


batch = 512
positions = 997
channels = 383
SMALL_SIZES = {"batch": 2, "positions": 7, "channels": 3}


def get_inputs():
    return [torch.randn(batch, positions, channels)]


def get_init_inputs():
    return []
