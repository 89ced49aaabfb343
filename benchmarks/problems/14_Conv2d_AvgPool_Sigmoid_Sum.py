"""Convolution, 2x2 average pooling, sigmoid, then a sum over channels and space per sample."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, pool_kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.avg_pool = nn.AvgPool2d(pool_kernel_size)

    def forward(self, x):
        x = self.conv(x)
        x = self.avg_pool(x)
        x = torch.sigmoid(x)
        x = torch.sum(x, dim=[1, 2, 3])
        return x


batch_size = 16
in_channels = 16
out_channels = 64
height = width = 64
kernel_size = 3
pool_kernel_size = 2
SMALL_SIZES = {"batch_size": 2, "in_channels": 3, "out_channels": 4, "height": 8, "width": 6}


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, pool_kernel_size]
