"""Recurrent cells as people write them by hand: an LSTM cell from two Linears (input-to-hidden and
hidden-to-hidden, the four gates taken with ``chunk``), a GRU cell with reset and update gates, a sequence
unrolled with a Python loop over time; and ``nn.LSTMCell`` unrolled the same way with a Linear head."""

from __future__ import annotations

import torch
from torch import nn


class LSTMCell(nn.Module):
    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.i2h = nn.Linear(input_size, 4 * hidden_size)
        self.h2h = nn.Linear(hidden_size, 4 * hidden_size)

    def forward(self, x, h, c):
        gates = self.i2h(x) + self.h2h(h)
        ingate, forgetgate, cellgate, outgate = gates.chunk(4, 1)
        ingate = torch.sigmoid(ingate)
        forgetgate = torch.sigmoid(forgetgate)
        cellgate = torch.tanh(cellgate)
        outgate = torch.sigmoid(outgate)
        c_next = (forgetgate * c) + (ingate * cellgate)
        h_next = outgate * torch.tanh(c_next)
        return h_next, c_next


class GRUCell(nn.Module):
    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.x2h = nn.Linear(input_size, 3 * hidden_size)
        self.h2h = nn.Linear(hidden_size, 3 * hidden_size)

    def forward(self, x, hidden):
        gate_x = self.x2h(x)
        gate_h = self.h2h(hidden)
        i_r, i_i, i_n = gate_x.chunk(3, 1)
        h_r, h_i, h_n = gate_h.chunk(3, 1)
        resetgate = torch.sigmoid(i_r + h_r)
        inputgate = torch.sigmoid(i_i + h_i)
        newgate = torch.tanh(i_n + (resetgate * h_n))
        hy = newgate + inputgate * (hidden - newgate)
        return hy


class UnrolledLSTM(nn.Module):
    """The hand-written LSTM cell over a ``(seq, batch, input)`` sequence, zeros as the initial state, the
    hidden states stacked."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size
        self.cell = LSTMCell(input_size, hidden_size)

    def forward(self, x):
        h = torch.zeros(x.shape[1], self.hidden_size, dtype=x.dtype, device=x.device)
        c = torch.zeros_like(h)
        outputs = []
        for t in range(x.shape[0]):
            h, c = self.cell(x[t], h, c)
            outputs.append(h)
        return torch.stack(outputs, 0)


class GRUStep(nn.Module):
    """Three steps of the hand-written GRU cell from a given state, the last state through a Linear head."""

    def __init__(self, input_size: int, hidden_size: int, out_size: int):
        super().__init__()
        self.cell = GRUCell(input_size, hidden_size)
        self.head = nn.Linear(hidden_size, out_size)

    def forward(self, x, h):
        for t in range(x.shape[1]):
            h = self.cell(x[:, t], h)
        return self.head(h)


class LSTMCellDecoder(nn.Module):
    """``nn.LSTMCell`` over a ``(batch, seq, input)`` sequence from a given state, a Linear on each step."""

    def __init__(self, input_size: int, hidden_size: int, out_size: int):
        super().__init__()
        self.cell = nn.LSTMCell(input_size, hidden_size)
        self.proj = nn.Linear(hidden_size, out_size)

    def forward(self, x, h, c):
        outs = []
        for t in range(x.size(1)):
            h, c = self.cell(x[:, t, :], (h, c))
            outs.append(self.proj(h))
        return torch.stack(outs, dim=1)
