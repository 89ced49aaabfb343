"""A bf16 SwiGLU MLP block: down(silu(gate(x)) * up(x)), as in Llama feed-forward layers."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, hidden_size, intermediate_size):
        super().__init__()
        self.gate = nn.Linear(hidden_size, intermediate_size, bias=False, dtype=torch.bfloat16)
        self.up = nn.Linear(hidden_size, intermediate_size, bias=False, dtype=torch.bfloat16)
        self.down = nn.Linear(intermediate_size, hidden_size, bias=False, dtype=torch.bfloat16)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


tokens = 128
hidden_size = 2048
intermediate_size = 5632
SMALL_SIZES = {"tokens": 4, "hidden_size": 16, "intermediate_size": 24}


def get_inputs():
    return [torch.randn(tokens, hidden_size, dtype=torch.bfloat16)]


def get_init_inputs():
    return [hidden_size, intermediate_size]
