"""3x3 max pooling with stride 2 and padding 1, hardtanh, then the spatial mean (keepdim)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size, stride=stride, padding=padding)
        self.hardtanh = nn.Hardtanh(min_val=-0.5, max_val=1.5)

    def forward(self, x):
        x = self.pool(x)
        x = self.hardtanh(x)
        return torch.mean(x, dim=(2, 3), keepdim=True)


batch_size = 32
channels = 64
height = width = 64
kernel_size = 3
stride = 2
padding = 1
SMALL_SIZES = {"batch_size": 2, "channels": 3, "height": 7, "width": 8}


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [kernel_size, stride, padding]
