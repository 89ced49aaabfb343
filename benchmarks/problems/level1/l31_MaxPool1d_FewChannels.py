"""nn.MaxPool1d(8, stride=1, padding=4, dilation=3) over fp32 [256, 3, 131071]."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, kernel_size, stride, padding, dilation):
        super().__init__()
        self.pool = nn.MaxPool1d(kernel_size, stride=stride, padding=padding, dilation=dilation)

    def forward(self, x):
        return self.pool(x)


batch_size = 256
features = 3
length = 131071
kernel_size = 8
stride = 1
padding = 4
dilation = 3
SMALL_SIZES = {"batch_size": 2, "features": 3, "length": 29}


def get_inputs():
    return [torch.randn(batch_size, features, length)]


def get_init_inputs():
    return [kernel_size, stride, padding, dilation]
