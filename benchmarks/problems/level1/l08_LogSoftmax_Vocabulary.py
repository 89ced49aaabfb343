"""torch.log_softmax over dim 1 of fp32 [2053, 50257] logits: rows of a GPT-2 vocabulary."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.log_softmax(x, dim=1)


batch_size = 2053
dim = 50257
SMALL_SIZES = {"batch_size": 3, "dim": 11}


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
