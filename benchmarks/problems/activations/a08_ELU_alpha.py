"""ELU with alpha=0.5 over an fp32 NCHW map [16, 64, 383, 383] (150M elements)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.act = nn.ELU(alpha=alpha)

    def forward(self, x):
        return self.act(x)


batch_size = 16
channels = 64
height = 383
width = 383
alpha = 0.5
SMALL_SIZES = {"batch_size": 1, "channels": 2, "height": 3, "width": 5}


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [alpha]
