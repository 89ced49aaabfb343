"""3x3 convolution followed by ReLU and HardSwish."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        x = self.conv(x)
        x = torch.relu(x)
        x = x * torch.clamp((x + 3) / 6, 0, 1)
        return x


batch_size = 16
in_channels = 32
out_channels = 64
height = width = 64
kernel_size = 3
SMALL_SIZES = {"batch_size": 2, "in_channels": 3, "out_channels": 4, "height": 7, "width": 6}


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
