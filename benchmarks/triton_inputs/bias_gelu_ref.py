"""The reference of bias_gelu_t2t.py."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(cols))

    def forward(self, x):
        return torch.nn.functional.gelu(x + self.bias, approximate="tanh")


def get_inputs():
    return [torch.randn(8192, 8192)]


def get_init_inputs():
    return [8192]
