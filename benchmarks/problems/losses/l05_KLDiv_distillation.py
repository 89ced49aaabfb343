"""Distillation KL divergence F.kl_div(log_softmax(student), softmax(teacher), batchmean) over fp32 logits [16, 1000, 8191]."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.temperature = temperature

    def forward(self, student_logits, teacher_logits):
        log_p = F.log_softmax(student_logits / self.temperature, dim=-1)
        q = F.softmax(teacher_logits / self.temperature, dim=-1)
        return F.kl_div(log_p, q, reduction="batchmean") * self.temperature**2


batch_size = 16
seq_len = 1000
vocab_size = 8191
temperature = 2.0
SMALL_SIZES = {"batch_size": 3, "seq_len": 1, "vocab_size": 5}


def get_inputs():
    return [torch.randn(batch_size, seq_len, vocab_size), torch.randn(batch_size, seq_len, vocab_size)]


def get_init_inputs():
    return [temperature]
