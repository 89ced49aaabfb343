"""Token embeddings (int64 ids [256, 512], table [50257, 768]) averaged over the sequence, then layer-normalized."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, vocab: int, dim: int):
        super().__init__()
        self.table = nn.Embedding(vocab, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, tokens):
        return self.norm(self.table(tokens).mean(dim=1))


batch = 256
length = 512
vocab = 50257
dim = 768
SMALL_SIZES = {"batch": 2, "length": 3, "vocab": 11, "dim": 5}


def get_inputs():
    return [torch.randint(0, vocab, (batch, length))]


def get_init_inputs():
    return [vocab, dim]
