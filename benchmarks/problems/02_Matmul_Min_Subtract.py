"""Linear layer, element-wise minimum with a constant, then subtraction of a learned scalar."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, constant):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.constant = nn.Parameter(torch.tensor(constant))

    def forward(self, x):
        x = self.linear(x)
        x = torch.min(x, self.constant)
        x = x - self.constant
        return x


batch_size = 128
in_features = 4096
out_features = 2048
constant = 0.5
SMALL_SIZES = {"batch_size": 8, "in_features": 32, "out_features": 16}


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, constant]
