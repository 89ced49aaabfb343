"""nn.AvgPool1d(8, stride=1, padding=4) over fp32 [1, 7, 15000017]: 7 rows of 15M."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.pool = nn.AvgPool1d(kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        return self.pool(x)


batch_size = 1
features = 7
length = 15000017
kernel_size = 8
stride = 1
padding = 4
SMALL_SIZES = {"batch_size": 1, "features": 2, "length": 19}


def get_inputs():
    return [torch.randn(batch_size, features, length)]


def get_init_inputs():
    return [kernel_size, stride, padding]
