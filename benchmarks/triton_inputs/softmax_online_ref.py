"""The reference of softmax_online_t2t.py."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(1024, 32768)]


def get_init_inputs():
    return []
