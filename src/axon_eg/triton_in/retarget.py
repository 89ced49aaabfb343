"""Device retargeting, the first stage of ``optimize-triton``: an input written for one vendor's GPU runs on the
device at hand (Xe-Forge's inputs are written for Intel GPUs: ``torch.xpu.is_available()``, ``.to("xpu")``,
``device="xpu"``, ``grf_mode`` in their ``triton.Config``s).

A libcst transformer (every other byte of the file kept) rewrites, from the source vendor's torch device to the
target's (``TORCH_DEVICE``):

- device strings: ``"xpu"`` / ``"xpu:0"`` -> ``"cuda"`` / ``"cuda:0"`` wherever they appear;
- ``torch.xpu.<name>`` (availability checks, ``synchronize``, streams, events, ...) -> ``torch.cuda.<name>``,
  and ``tensor.xpu()`` -> ``tensor.cuda()``;
- launch and config keywords only another vendor's Triton takes (``VENDOR_KEYWORDS``: Intel's ``grf_mode``,
  ``warp_size``, ...), as keyword arguments of a launch ``kernel[grid](...)`` or of ``triton.Config(...)``, or as
  keys of a ``triton.Config``'s dict, are removed;
- the import of a vendor's torch extension (``intel_extension_for_pytorch``) is removed;
- to the CPU (the Triton interpreter): ``torch.cpu.Event`` / ``Stream`` lose their arguments (the CPU's take
  none; a module that records events for its own profiling still runs).

Each change is recorded (``what``, line) and the input's row says it was retargeted; the reverse (an Intel target,
``--hw intel-xe2``) maps the other way. :func:`vendor_of` tells which vendor a file is written for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

TORCH_DEVICE = {"nvidia": "cuda", "intel": "xpu", "amd": "cuda"}
"""The torch device type of each vendor's GPUs (AMD's ROCm builds answer to ``cuda``)."""
VENDOR_KEYWORDS = {"intel": ("grf_mode", "warp_size", "threads_per_warp"),
                   "amd": ("waves_per_eu", "matrix_instr_nonkdim", "kpack"),
                   "nvidia": ("maxnreg",)}
"""Launch and ``triton.Config`` keywords only that vendor's Triton backend takes (others refuse them: ``Keyword
argument grf_mode was specified but unrecognised``)."""
VENDOR_IMPORTS = {"intel": ("intel_extension_for_pytorch",)}
"""Torch extensions only that vendor's machines have."""


@dataclass
class Retargeted:
    """The file's text for the target, the vendor it was written for, and each change made (``"line 7: torch.xpu
    -> torch.cuda"``)."""

    text: str
    source: str | None
    target: str
    device: str | None = None  # the torch device it now names (the target's, or "cpu" under the interpreter)
    changes: list[str] = field(default_factory=list)


def vendor_of(text: str) -> str | None:
    """The vendor a file is written for, from its device strings, ``torch.<device>`` uses and vendor-only
    keywords, comments aside: ``"intel"`` (xpu), ``"nvidia"`` (cuda), None when it names no device (it runs
    anywhere)."""
    text = _code(text)
    if re.search(r"""["']xpu(:\d+)?["']|torch\.xpu\b|\.xpu\(\)|intel_extension_for_pytorch""", text) or \
            re.search(r"\b(grf_mode|threads_per_warp)\b", text):
        return "intel"
    if re.search(r"""["']cuda(:\d+)?["']|torch\.cuda\b|\.cuda\(\)""", text):
        return "nvidia"
    return None


def _code(text: str) -> str:
    """``text`` without its comments (what runs: a comment naming ``grf_mode`` targets nothing)."""
    import io
    import tokenize

    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type != tokenize.COMMENT]
        return tokenize.untokenize(tokens)
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return text


def retarget(text: str, target: str, device: str | None = None, source: str | None = None) -> Retargeted:
    """``text`` rewritten for ``target``, the vendor whose Triton runs it (``nvidia``, ``intel``, ``amd``), on the
    torch ``device`` (default the vendor's, ``TORCH_DEVICE``; ``"cpu"`` under the Triton interpreter) from
    ``source`` (default :func:`vendor_of`); unchanged when the file names no device, or the same."""
    source = vendor_of(text) if source is None else source
    device = TORCH_DEVICE[target] if device is None else device
    if source is None or (source == target and TORCH_DEVICE[source] == device):
        return Retargeted(text, source, target, device)
    module = cst.parse_module(text)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    drop = tuple(k for vendor, keys in VENDOR_KEYWORDS.items() if vendor != target for k in keys)
    imports = tuple(m for vendor, mods in VENDOR_IMPORTS.items() if vendor != target for m in mods)
    change = _Retarget(TORCH_DEVICE[source], device, drop, imports)
    new = wrapper.visit(change)
    return Retargeted(new.code, source, target, device, change.changes)


class _Retarget(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, old: str, new: str, drop: tuple[str, ...], imports: tuple[str, ...]) -> None:
        super().__init__()
        self.old, self.new, self.drop, self.imports = old, new, drop, imports
        self.device = re.compile(rf"""(?P<q>['"]){old}(?P<n>:\d+)?(?P=q)\Z""")
        self.changes: list[str] = []

    def _line(self, node: cst.CSTNode) -> int:
        return self.get_metadata(PositionProvider, node).start.line

    def _said(self, node: cst.CSTNode, what: str) -> None:
        self.changes.append(f"line {self._line(node)}: {what}")

    # "xpu" / "xpu:1" -> "cuda" / "cuda:1"
    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString) -> cst.SimpleString:
        if self.old == self.new:
            return updated
        m = self.device.match(updated.value)
        if m is None:
            return updated
        value = f"{m['q']}{self.new}{m['n'] or ''}{m['q']}"
        self._said(original, f"{updated.value} -> {value}")
        return updated.with_changes(value=value)

    # torch.xpu.X -> torch.cuda.X; t.xpu() -> t.cuda()
    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        if self.old == self.new:
            return updated
        if updated.attr.value == self.old and isinstance(updated.value, cst.Name) and updated.value.value == "torch":
            self._said(original, f"torch.{self.old} -> torch.{self.new}")
            return updated.with_changes(attr=cst.Name(self.new))
        return updated

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if self.new == "cpu" and updated.args and _dotted(updated.func) in ("torch.cpu.Event", "torch.cpu.Stream"):
            # the interpreter's device: torch.cpu.Event() / Stream() take no arguments (timing, priority)
            self._said(original, f"{_dotted(updated.func)} arguments dropped (the CPU's takes none)")
            return updated.with_changes(args=[])
        func = updated.func
        if self.old != self.new and isinstance(func, cst.Attribute) and func.attr.value == self.old \
                and not updated.args and not (isinstance(func.value, cst.Name) and func.value.value == "torch"):
            self._said(original, f".{self.old}() -> .{self.new}()")
            updated = updated.with_changes(func=func.with_changes(attr=cst.Name(self.new)))
        launch = isinstance(updated.func, cst.Subscript)  # kernel[grid](...)
        config = _dotted(updated.func) in ("triton.Config", "Config")
        if not (launch or config):
            return updated
        args = []
        for a in updated.args:
            if a.keyword is not None and a.keyword.value in self.drop:
                self._said(original, f"{'launch' if launch else 'triton.Config'} keyword {a.keyword.value} removed "
                                     f"(another vendor's Triton takes it)")
                continue
            if config and a.keyword is None and isinstance(a.value, cst.Dict) and args == []:
                kept = [e for e in a.value.elements if not (isinstance(e, cst.DictElement)
                                                            and isinstance(e.key, cst.SimpleString)
                                                            and e.key.evaluated_value in self.drop)]
                for e in a.value.elements:
                    if e not in kept:
                        self._said(original, f"triton.Config key {e.key.evaluated_value} removed (another vendor's "
                                             "Triton takes it)")
                if len(kept) != len(a.value.elements):
                    if kept:
                        kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                    a = a.with_changes(value=a.value.with_changes(elements=kept))
            args.append(a)
        if len(args) != len(updated.args) and args:
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(args=args)

    # import intel_extension_for_pytorch [as ipex]: removed
    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine,
                                  updated: cst.SimpleStatementLine) -> cst.BaseStatement | cst.RemovalSentinel:
        body = updated.body
        if len(body) == 1 and isinstance(body[0], cst.Import) and all(
                _dotted(n.name).split(".")[0] in self.imports for n in body[0].names):
            self._said(original, f"import {', '.join(_dotted(n.name) for n in body[0].names)} removed")
            return cst.RemoveFromParent()
        return updated


def _dotted(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""


__all__ = ["TORCH_DEVICE", "VENDOR_IMPORTS", "VENDOR_KEYWORDS", "Retargeted", "retarget", "vendor_of"]
