"""nn.AvgPool3d (kernel 3, stride 2, padding 1) over fp32 [4, 24, 61, 181, 179] volumes."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.pool = nn.AvgPool3d(kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        return self.pool(x)


batch = 4
channels = 24
depth = 61
height = 181
width = 179
kernel_size = 3
stride = 2
padding = 1
SMALL_SIZES = {"batch": 1, "channels": 2, "depth": 3, "height": 5, "width": 7}


def get_inputs():
    return [torch.randn(batch, channels, depth, height, width)]


def get_init_inputs():
    return [kernel_size, stride, padding]
