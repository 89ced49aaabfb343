"""The PyTorch reference of scale_add_t2t.py (KernelBench format)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(cols))

    def forward(self, x):
        return x * 2.0 + self.bias


def get_inputs():
    return [torch.randn(9, 33)]


def get_init_inputs():
    return [33]
