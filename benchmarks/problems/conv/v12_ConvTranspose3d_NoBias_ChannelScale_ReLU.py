"""Bias-free ConvTranspose3d 64->64 (3x3x3, stride 2) on [16, 64, 16, 32, 32], a per-channel scale, then ReLU, fp32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv_t = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=2, padding=1, output_padding=1,
                                         bias=False)
        self.scale = nn.Parameter(torch.randn(out_channels, 1, 1, 1))

    def forward(self, x):
        y = self.conv_t(x) * self.scale
        return torch.relu(y)


batch_size = 16
in_channels = 64
out_channels = 64
depth = 16
height = width = 32
kernel_size = 3
SMALL_SIZES = {"batch_size": 2, "in_channels": 3, "out_channels": 5, "depth": 3, "height": 4, "width": 5}


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
