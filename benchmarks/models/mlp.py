"""A plain wide MLP (Linear, LayerNorm, ReLU, dropout, repeated), as in tabular and recommendation models."""

from __future__ import annotations

from torch import nn


class WideMLP(nn.Module):
    def __init__(self, in_features: int, hidden: int, out_features: int, layers: int = 3, dropout: float = 0.1):
        super().__init__()
        blocks = []
        width = in_features
        for _ in range(layers):
            blocks += [nn.Linear(width, hidden), nn.LayerNorm(hidden), nn.ReLU(), nn.Dropout(dropout)]
            width = hidden
        self.body = nn.Sequential(*blocks)
        self.head = nn.Linear(hidden, out_features)

    def forward(self, x):
        return self.head(self.body(x))
