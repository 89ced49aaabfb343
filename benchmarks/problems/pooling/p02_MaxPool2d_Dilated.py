"""nn.MaxPool2d (kernel 3, stride 2, padding 1, dilation 2) over fp32 [32, 96, 255, 257] feature maps."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, kernel_size, stride, padding, dilation):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size, stride=stride, padding=padding, dilation=dilation)

    def forward(self, x):
        return self.pool(x)


batch = 32
channels = 96
height = 255
width = 257
kernel_size = 3
stride = 2
padding = 1
dilation = 2
SMALL_SIZES = {"batch": 2, "channels": 3, "height": 7, "width": 5}


def get_inputs():
    return [torch.randn(batch, channels, height, width)]


def get_init_inputs():
    return [kernel_size, stride, padding, dilation]
