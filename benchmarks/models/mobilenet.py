"""MobileNetV2's inverted residual: a 1x1 expansion, a 3x3 depthwise convolution (``groups`` = channels),
a linear 1x1 projection, each with batch norm, ReLU6 after the first two, a residual when the shape is kept."""

from __future__ import annotations

from torch import nn


class ConvBNReLU(nn.Sequential):
    def __init__(self, in_planes: int, out_planes: int, kernel_size: int = 3, stride: int = 1, groups: int = 1):
        padding = (kernel_size - 1) // 2
        super().__init__(
            nn.Conv2d(in_planes, out_planes, kernel_size, stride, padding, groups=groups, bias=False),
            nn.BatchNorm2d(out_planes),
            nn.ReLU6(inplace=True),
        )


class InvertedResidual(nn.Module):
    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden_dim = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU(inp, hidden_dim, kernel_size=1))
        layers.extend([
            ConvBNReLU(hidden_dim, hidden_dim, stride=stride, groups=hidden_dim),
            nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False),
            nn.BatchNorm2d(oup),
        ])
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        if self.use_res_connect:
            return x + self.conv(x)
        return self.conv(x)


class InvertedResidualStack(nn.Module):
    """A MobileNetV2 stage: ``n`` inverted residuals, the first one striding."""

    def __init__(self, inp: int, oup: int, n: int, stride: int, expand_ratio: int = 6):
        super().__init__()
        blocks = []
        for i in range(n):
            blocks.append(InvertedResidual(inp if i == 0 else oup, oup, stride if i == 0 else 1, expand_ratio))
        self.blocks = nn.Sequential(*blocks)

    def forward(self, x):
        return self.blocks(x)
