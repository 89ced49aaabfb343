"""Conv3d 32->64 (3x3x3, padding 1) on [16, 32, 16, 64, 64], ReLU, 2x2x2 max pool, then a per-channel bias, fp32."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1, 1))

    def forward(self, x):
        y = torch.relu(self.conv(x))
        y = F.max_pool3d(y, kernel_size=2)
        return y + self.bias


batch_size = 16
in_channels = 32
out_channels = 64
depth = 16
height = width = 64
kernel_size = 3
SMALL_SIZES = {"batch_size": 1, "in_channels": 3, "out_channels": 4, "depth": 5, "height": 6, "width": 7}


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
