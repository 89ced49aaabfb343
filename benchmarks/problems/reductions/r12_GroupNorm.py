"""nn.GroupNorm with 12 groups of 8 channels over fp32 [128, 96, 127, 129] feature maps, with affine."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, num_groups, channels):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, channels, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(channels))
            self.norm.bias.copy_(0.1 * torch.randn(channels))

    def forward(self, x):
        return self.norm(x)


batch = 128
channels = 96
num_groups = 12
height = 127
width = 129
SMALL_SIZES = {"batch": 2, "channels": 6, "num_groups": 3, "height": 5, "width": 3}


def get_inputs():
    return [torch.randn(batch, channels, height, width)]


def get_init_inputs():
    return [num_groups, channels]
