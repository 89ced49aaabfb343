"""Mish written out as x * tanh(softplus(x)) over an fp32 NCHW map [20, 129, 255, 255] (168M elements)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * torch.tanh(F.softplus(x))


batch_size = 20
channels = 129
height = 255
width = 255
SMALL_SIZES = {"batch_size": 1, "channels": 3, "height": 5, "width": 5}


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []
