"""Conv2d 64->128 channels (3x3, padding 1) on [64, 64, 96, 96], Mish, then a per-channel bias parameter, fp32."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1))

    def forward(self, x):
        y = F.mish(self.conv(x))
        return y + self.bias


batch_size = 64
in_channels = 64
out_channels = 128
height = width = 96
kernel_size = 3
SMALL_SIZES = {"batch_size": 1, "in_channels": 3, "out_channels": 4, "height": 7, "width": 5}


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
