"""nn.MaxPool2d(4, stride=1, padding=1) over fp32 [15, 64, 512, 512]: 42_Max_Pooling_2D, batch 32 cut to 15."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, kernel_size, stride, padding, dilation):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size, stride=stride, padding=padding, dilation=dilation)

    def forward(self, x):
        return self.pool(x)


batch_size = 15
channels = 64
height = 512
width = 512
kernel_size = 4
stride = 1
padding = 1
dilation = 1
SMALL_SIZES = {"batch_size": 2, "channels": 3, "height": 7, "width": 9}


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [kernel_size, stride, padding, dilation]
