"""EfficientNet's MBConv: 1x1 expansion, depthwise conv, squeeze-and-excitation (global average pool, two 1x1
convs, SiLU then sigmoid, the gate multiplied in), 1x1 projection; batch norm and SiLU; a residual when the
shape is kept."""

from __future__ import annotations

from torch import nn


class SqueezeExcitation(nn.Module):
    def __init__(self, input_channels: int, squeeze_channels: int):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(input_channels, squeeze_channels, 1)
        self.fc2 = nn.Conv2d(squeeze_channels, input_channels, 1)
        self.activation = nn.SiLU()
        self.scale_activation = nn.Sigmoid()

    def forward(self, x):
        scale = self.avgpool(x)
        scale = self.fc1(scale)
        scale = self.activation(scale)
        scale = self.fc2(scale)
        return self.scale_activation(scale) * x


class MBConv(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, expand_ratio: int, kernel: int, stride: int, se_ratio: float = 0.25):
        super().__init__()
        hidden = in_ch * expand_ratio
        self.use_res = stride == 1 and in_ch == out_ch
        self.expand = nn.Sequential(nn.Conv2d(in_ch, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.SiLU(inplace=True))
        self.depthwise = nn.Sequential(
            nn.Conv2d(hidden, hidden, kernel, stride, kernel // 2, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.SiLU(inplace=True),
        )
        self.se = SqueezeExcitation(hidden, max(1, int(in_ch * se_ratio)))
        self.project = nn.Sequential(nn.Conv2d(hidden, out_ch, 1, bias=False), nn.BatchNorm2d(out_ch))

    def forward(self, x):
        out = self.expand(x)
        out = self.depthwise(out)
        out = self.se(out)
        out = self.project(out)
        if self.use_res:
            out = out + x
        return out


class MBConvStage(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, layers: int, expand_ratio: int = 6, kernel: int = 3, stride: int = 2):
        super().__init__()
        self.blocks = nn.Sequential(*[MBConv(in_ch if i == 0 else out_ch, out_ch, expand_ratio, kernel,
                                             stride if i == 0 else 1) for i in range(layers)])

    def forward(self, x):
        return self.blocks(x)
