"""A BERT encoder layer as the original port writes it: separate query/key/value Linears,
``transpose_for_scores``, scores divided by ``math.sqrt(head_size)`` plus the extended additive attention
mask (built in the forward from a 0/1 mask), softmax, dropout, the context back to ``(B, S, H)``; post-norm
residual LayerNorms; the exact (erf) GELU in the intermediate layer."""

from __future__ import annotations

import math

import torch
from torch import nn


class BertSelfAttention(nn.Module):
    def __init__(self, hidden_size: int, num_attention_heads: int, dropout: float = 0.1):
        super().__init__()
        self.num_attention_heads = num_attention_heads
        self.attention_head_size = hidden_size // num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.query = nn.Linear(hidden_size, self.all_head_size)
        self.key = nn.Linear(hidden_size, self.all_head_size)
        self.value = nn.Linear(hidden_size, self.all_head_size)
        self.dropout = nn.Dropout(dropout)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        x = x.view(new_x_shape)
        return x.permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_scores = attention_scores + attention_mask
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        attention_probs = self.dropout(attention_probs)
        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        return context_layer.view(new_context_layer_shape)


class BertSelfOutput(nn.Module):
    """Also BERT's ``BertOutput`` (``in_size`` the intermediate size): dense, dropout, residual LayerNorm."""

    def __init__(self, hidden_size: int, in_size: int | None = None, eps: float = 1e-12, dropout: float = 0.1):
        super().__init__()
        self.dense = nn.Linear(in_size or hidden_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)
        return self.LayerNorm(hidden_states + input_tensor)


class BertIntermediate(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, intermediate_size)

    def forward(self, hidden_states):
        hidden_states = self.dense(hidden_states)
        return hidden_states * 0.5 * (1.0 + torch.erf(hidden_states / math.sqrt(2.0)))


class BertLayer(nn.Module):
    def __init__(self, hidden_size: int, num_attention_heads: int, intermediate_size: int):
        super().__init__()
        self.attention = BertSelfAttention(hidden_size, num_attention_heads)
        self.attention_output = BertSelfOutput(hidden_size)
        self.intermediate = BertIntermediate(hidden_size, intermediate_size)
        self.output = BertSelfOutput(hidden_size, intermediate_size)

    def forward(self, hidden_states, attention_mask):
        # attention_mask: (batch, seq) of 1 (attend) and 0 (padding)
        extended_attention_mask = attention_mask[:, None, None, :].to(dtype=hidden_states.dtype)
        extended_attention_mask = (1.0 - extended_attention_mask) * -10000.0
        self_outputs = self.attention(hidden_states, extended_attention_mask)
        attention_output = self.attention_output(self_outputs, hidden_states)
        intermediate_output = self.intermediate(attention_output)
        return self.output(intermediate_output, attention_output)
