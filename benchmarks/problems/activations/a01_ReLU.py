"""ReLU over an fp32 NCHW feature map [32, 96, 224, 224] (154M elements)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


batch_size = 32
channels = 96
height = 224
width = 224
SMALL_SIZES = {"batch_size": 2, "channels": 3, "height": 5, "width": 7}


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []
