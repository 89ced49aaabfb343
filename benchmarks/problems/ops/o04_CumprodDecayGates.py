"""Decay weights of a gated recurrence: cumprod of sigmoid gates over 2048 steps times the values; fp32 [32, 2048, 512]."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, gates, values):
        decay = torch.cumprod(torch.sigmoid(gates + 4.0), dim=1)
        return decay * values


batch = 32
steps = 2048
width = 512
SMALL_SIZES = {"batch": 2, "steps": 9, "width": 3}


def get_inputs():
    return [torch.randn(batch, steps, width), torch.randn(batch, steps, width)]


def get_init_inputs():
    return []
