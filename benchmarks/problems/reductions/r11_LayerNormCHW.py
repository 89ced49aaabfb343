"""nn.LayerNorm over (C, H, W) of fp32 [64, 96, 181, 179] feature maps: 64 rows of 3.1M values, elementwise affine."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels, height, width):
        super().__init__()
        self.norm = nn.LayerNorm((channels, height, width))
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(channels, height, width))
            self.norm.bias.copy_(0.1 * torch.randn(channels, height, width))

    def forward(self, x):
        return self.norm(x)


batch = 64
channels = 96
height = 181
width = 179
SMALL_SIZES = {"batch": 2, "channels": 3, "height": 5, "width": 7}


def get_inputs():
    return [torch.randn(batch, channels, height, width)]


def get_init_inputs():
    return [channels, height, width]
