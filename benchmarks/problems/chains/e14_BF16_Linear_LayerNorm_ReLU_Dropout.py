"""bf16 Linear 8192->8192 on 8192 rows, LayerNorm over the features, ReLU, then dropout with p=0.0."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, dropout_p):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, dtype=torch.bfloat16)
        self.norm = nn.LayerNorm(out_features, dtype=torch.bfloat16)
        self.dropout = nn.Dropout(p=dropout_p)

    def forward(self, x):
        y = self.linear(x)
        y = self.norm(y)
        y = torch.relu(y)
        return self.dropout(y)


batch_size = 8192
in_features = 8192
out_features = 8192
dropout_p = 0.0
SMALL_SIZES = {"batch_size": 1, "in_features": 19, "out_features": 29}


def get_inputs():
    return [torch.randn(batch_size, in_features, dtype=torch.bfloat16)]


def get_init_inputs():
    return [in_features, out_features, dropout_p]
