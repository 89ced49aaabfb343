"""A Mixtral-style expert MLP as Hugging Face's ``MixtralBlockSparseTop2MLP`` writes it, applied to the tokens the
router sent to this expert: ``w2(silu(w1(x)) * w3(x))``, each token's output scaled by its routing weight (the
top-2 softmax probability), as ``MixtralSparseMoeBlock`` does before the scatter-add."""

from __future__ import annotations

import torch
from torch import nn


class MixtralExpertMLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.w1 = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.w2 = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.w3 = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, hidden_states: torch.Tensor, routing_weights: torch.Tensor) -> torch.Tensor:
        current = self.act_fn(self.w1(hidden_states)) * self.w3(hidden_states)
        return self.w2(current) * routing_weights[:, None]
