"""Per-token log-likelihood: log_softmax over 32000 words, the int64 target's entry by gather; fp32 [4096, 32000]."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        logp = torch.log_softmax(logits, dim=-1)
        return torch.gather(logp, 1, targets[:, None]).squeeze(1)


tokens = 4096
vocab = 32000
SMALL_SIZES = {"tokens": 3, "vocab": 7}


def get_inputs():
    return [torch.randn(tokens, vocab), torch.randint(0, vocab, (tokens,))]


def get_init_inputs():
    return []
