"""bf16 Linear with bias and SiLU at sizes with tails in every dim (M, K and N not multiples of 64)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, dtype=torch.bfloat16)

    def forward(self, x):
        return F.silu(self.linear(x))


batch_size = 3001
in_features = 2049
out_features = 5000
SMALL_SIZES = {"batch_size": 37, "in_features": 33, "out_features": 19}


def get_inputs():
    return [torch.randn(batch_size, in_features, dtype=torch.bfloat16)]


def get_init_inputs():
    return [in_features, out_features]
