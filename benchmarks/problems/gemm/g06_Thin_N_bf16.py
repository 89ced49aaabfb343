"""A thin bf16 projection (N = 64 output columns, as a router or a low-rank down-projection) with a tanh."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.proj = nn.Linear(in_features, out_features, bias=False, dtype=torch.bfloat16)

    def forward(self, x):
        return torch.tanh(self.proj(x))


tokens = 16384
in_features = 4096
out_features = 64
SMALL_SIZES = {"tokens": 40, "in_features": 32, "out_features": 16}


def get_inputs():
    return [torch.randn(tokens, in_features, dtype=torch.bfloat16)]


def get_init_inputs():
    return [in_features, out_features]
