"""Conv3d 32->128 (3x3x3, stride 2, padding 1) on [16, 32, 32, 64, 64], GroupNorm(8), then the mean over D, H, W, fp32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, num_groups):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, stride=2, padding=1)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x):
        y = self.group_norm(self.conv(x))
        return y.mean(dim=(2, 3, 4))


batch_size = 16
in_channels = 32
out_channels = 128
depth = 32
height = width = 64
kernel_size = 3
num_groups = 8
SMALL_SIZES = {"batch_size": 2, "in_channels": 3, "out_channels": 4, "depth": 5, "height": 7, "width": 6, "num_groups": 2}


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups]
