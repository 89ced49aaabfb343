"""Builder shorthand for tests that write programs by hand: ``e.log(x)`` emits an op, ``e.c(1.0)`` a constant."""

from __future__ import annotations

from collections.abc import Callable

from axon_eg.ir.builder import Builder, Value


class Emitter:
    """``e = Emitter(builder)``: ``e.matmul(a, b)`` is ``builder.emit("matmul", a, b)``; ``e.c(2.0)`` an fp32
    constant."""

    def __init__(self, b: Builder):
        self.b = b

    def c(self, v: float) -> Value:
        return self.b.constant(v, "fp32")

    def __getattr__(self, op: str) -> Callable[..., Value]:
        return lambda *xs, **attrs: self.b.emit(op, *xs, **attrs)
