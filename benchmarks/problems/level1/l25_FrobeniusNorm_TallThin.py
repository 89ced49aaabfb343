"""x / torch.norm(x, p='fro') over a tall-thin fp32 [5000011, 7] matrix."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x / torch.norm(x, p="fro")


rows = 5000011
cols = 7
SMALL_SIZES = {"rows": 5, "cols": 3}


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
