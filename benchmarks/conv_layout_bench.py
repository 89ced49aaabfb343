"""cuDNN convolution in NCHW against channels-last (NHWC), per conv problem of ``benchmarks/problems/conv``.

Prints one line per problem (microseconds, CUDA events, 20 runs after 3 warm-ups; cuDNN's default TF32 for fp32):
the input and output shapes, the conv alone in NCHW, one element-wise pass over the input and over the output
(what a layout copy costs at best), then for 2-d and 3-d convs: the conv on channels-last weights with the
input converted by torch (``x.contiguous(memory_format=...)``) inside the timing, the same with the output
converted back to NCHW, the conv on an input already channels-last; then the NCHW and converted-input times
again with ``torch.backends.cudnn.benchmark`` on; last, for convs with a bias, the conv without it (NCHW, and
NHWC on the ready input): torch.compile leaves the bias to its fused epilogue. The numbers behind the conv
paragraph of the held-out corpus's run 3 (issue 18, ``benchmarks/results/runs/2026-12-03-heldout-run3.md``): what an
ISA choice "cuDNN in NHWC" would gain, and what torch's own layout copies would eat of it.

    python benchmarks/conv_layout_bench.py [v10 v11 ...]   # on a GPU; the problems' own sizes and initialization
                                                           # (named problems only, by prefix; default: all)
"""

from __future__ import annotations

import glob
import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load(path: str):
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _time(fn, n: int = 20) -> float:
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n * 1e3


def main() -> int:
    import torch
    import torch.nn as nn

    if not torch.cuda.is_available():
        print("conv_layout_bench: needs a CUDA GPU", file=sys.stderr)
        return 2
    convs = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
    print("problem x y nchw x_pass y_pass | nhwc+x_copy nhwc+x_copy+y_copy nhwc_x_ready | benchmark: nchw nhwc+x_copy "
          "| no bias: nchw nhwc_x_ready")
    wanted = sys.argv[1:]
    for path in sorted(glob.glob(str(ROOT / "benchmarks/problems/conv/v*.py"))):
        if wanted and not any(os.path.basename(path).startswith(w) for w in wanted):
            continue
        mod = _load(path)
        torch.manual_seed(0)
        model = mod.Model(*mod.get_init_inputs()).cuda()
        x = mod.get_inputs()[0].cuda()
        conv = next(m for m in model.modules() if isinstance(m, convs))
        fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(x.dim())
        with torch.no_grad():
            y = conv(x)
            row = [os.path.basename(path)[:3], tuple(x.shape), tuple(y.shape), _time(lambda: conv(x)),
                   _time(lambda: x.add(1.0)), _time(lambda: y.add(1.0))]
            if fmt is not None:
                cl = conv.to(memory_format=fmt)
                ready = x.contiguous(memory_format=fmt)
                row += ["|", _time(lambda: cl(x.contiguous(memory_format=fmt))),
                        _time(lambda: cl(x.contiguous(memory_format=fmt)).contiguous()), _time(lambda: cl(ready))]
                conv.to(memory_format=torch.contiguous_format)
            torch.backends.cudnn.benchmark = True
            row += ["| benchmark:", _time(lambda: conv(x))]
            if fmt is not None:
                cl = conv.to(memory_format=fmt)
                row.append(_time(lambda: cl(x.contiguous(memory_format=fmt))))
                conv.to(memory_format=torch.contiguous_format)
            torch.backends.cudnn.benchmark = False
            if conv.bias is not None:
                fn = getattr(torch.nn.functional, type(conv).__name__.replace("ConvTranspose", "conv_transpose")
                             .replace("Conv", "conv"))
                kw = {a: getattr(conv, a) for a in ("stride", "padding", "dilation", "groups")}
                if "transpose" in fn.__name__:
                    kw["output_padding"] = conv.output_padding
                row += ["| no bias:", _time(lambda: fn(x, conv.weight, None, **kw))]
                if fmt is not None:
                    w = conv.weight.contiguous(memory_format=fmt)
                    row.append(_time(lambda: fn(ready, w, None, **kw)))
        print(*(f"{v:.1f}" if isinstance(v, float) else v for v in row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
