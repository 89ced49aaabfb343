"""nn.MaxPool3d (kernel (2, 3, 3), stride (1, 2, 2), padding (0, 1, 1)) over fp32 [4, 32, 37, 211, 199] volumes."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.pool = nn.MaxPool3d(kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        return self.pool(x)


batch = 4
channels = 32
depth = 37
height = 211
width = 199
kernel_size = (2, 3, 3)
stride = (1, 2, 2)
padding = (0, 1, 1)
SMALL_SIZES = {"batch": 1, "channels": 3, "depth": 3, "height": 5, "width": 7}


def get_inputs():
    return [torch.randn(batch, channels, depth, height, width)]


def get_init_inputs():
    return [kernel_size, stride, padding]
