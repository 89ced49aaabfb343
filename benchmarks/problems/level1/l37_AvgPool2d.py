"""nn.AvgPool2d(11) over fp32 [1, 63, 2048, 2048]: KernelBench 45_Average_Pooling_2D, [16, 64] cut to [1, 63]."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, kernel_size):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size)

    def forward(self, x):
        return self.pool(x)


batch_size = 1
channels = 63
height = 2048
width = 2048
kernel_size = 11
SMALL_SIZES = {"batch_size": 2, "channels": 3, "height": 23, "width": 25}


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [kernel_size]
