"""x / torch.norm(x, p='fro') over one fp32 vector of 150000001 values."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x / torch.norm(x, p="fro")


length = 150000001
SMALL_SIZES = {"length": 17}


def get_inputs():
    return [torch.randn(length)]


def get_init_inputs():
    return []
