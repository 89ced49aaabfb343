"""A bf16 MLP up-projection with a non-power-of-two width (N = 11008, as Llama-7B's) and a GELU."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.up = nn.Linear(hidden, intermediate, bias=False, dtype=torch.bfloat16)

    def forward(self, x):
        return F.gelu(self.up(x))


tokens = 4096
hidden = 4096
intermediate = 11008
SMALL_SIZES = {"tokens": 24, "hidden": 32, "intermediate": 40}


def get_inputs():
    return [torch.randn(tokens, hidden, dtype=torch.bfloat16)]


def get_init_inputs():
    return [hidden, intermediate]
