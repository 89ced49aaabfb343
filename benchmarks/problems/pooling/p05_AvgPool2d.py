"""nn.AvgPool2d (kernel 5, stride 3, padding 2, padding counted) over fp32 [40, 72, 263, 271] feature maps."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        return self.pool(x)


batch = 40
channels = 72
height = 263
width = 271
kernel_size = 5
stride = 3
padding = 2
SMALL_SIZES = {"batch": 2, "channels": 3, "height": 7, "width": 11}


def get_inputs():
    return [torch.randn(batch, channels, height, width)]


def get_init_inputs():
    return [kernel_size, stride, padding]
