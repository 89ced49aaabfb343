"""Attention blocks written with PyTorch's own pieces: a causal self-attention block with one fused qkv
Linear split by ``chunk`` and ``F.scaled_dot_product_attention``; and ``nn.TransformerEncoderLayer``
(``batch_first``, pre-norm) as people use it without writing attention at all."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn


class CausalAttentionBlock(nn.Module):
    def __init__(self, dim: int, n_heads: int, mlp_ratio: int = 4, dropout: float = 0.0):
        super().__init__()
        self.n_heads = n_heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.norm2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(approximate="tanh"), nn.Linear(mlp_ratio * dim, dim))
        self.dropout = dropout

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q = q.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2)
        k = k.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2)
        v = v.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        y = y.transpose(1, 2).reshape(b, t, d)
        x = x + self.out(y)
        return x + self.ff(self.norm2(x))


class TorchEncoder(nn.Module):
    """Two ``nn.TransformerEncoderLayer``s in an ``nn.TransformerEncoder``, GELU, pre-norm, batch first."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int, num_layers: int = 2):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout=0.1, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)

    def forward(self, x):
        return self.encoder(x)
