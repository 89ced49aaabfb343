"""nn.AdaptiveAvgPool2d to a 3x5 output (uneven windows) from fp32 [64, 288, 97, 113] feature maps."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, output_size):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(output_size)

    def forward(self, x):
        return self.pool(x)


batch = 64
channels = 288
height = 97
width = 113
output_size = (3, 5)
SMALL_SIZES = {"batch": 2, "channels": 3, "height": 7, "width": 11}


def get_inputs():
    return [torch.randn(batch, channels, height, width)]


def get_init_inputs():
    return [output_size]
