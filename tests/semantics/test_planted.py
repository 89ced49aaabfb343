"""A planted battery of identities the prover must never prove, and true ones it must still prove.

Each false identity is false in the float64 reference (NumPy's IEEE arithmetic) and comes with a
witness (sizes and inputs) at which the reference tells its sides apart: one finite and the other not,
or both finite and different. Equality is the reference's: at every input both sides are finite and
equal, or both are not finite. Kinds:

- ``domain``: log / sqrt / rsqrt / div / reciprocal / pow applied where the other side is defined;
- ``nan``: NaN (or an infinity) swallowed on one side only: a comparison of NaN is false, x ** 0 is 1,
  relu(-inf) = 0, tanh(inf) = 1, while arithmetic propagates it;
- ``signed zero``: -0.0 makes 1/x and rsqrt(x) -inf where +0.0 makes them +inf, and a maximum, relu or
  exp then tells the two apart;
- ``integer``: truncation, floor and rounding, integer inputs, index arithmetic (reshape's div / mod);
- ``broadcast``: an operand broadcast along the wrong axis;
- ``axis``: a reduction, scan or softmax over the wrong axis;
- ``where``: ``where`` and comparisons: guards, swapped branches, strict vs non-strict comparisons, and
  the partial functions a guard protects (issue 48: ``where``'s domain was the conjunction of both
  branches' domains, and the NumPy search never sampled the guarded region).

Every false identity is checked twice: through ``prove_equal`` (the NumPy search first) and through the
symbolic path alone (``numeric=False``); neither may prove it. The true ones (several with partial
functions, guards and signed zeros in them) must be proved, so the battery cannot pass by refusing
everything.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from axon_eg.ir import dims as D
from axon_eg.ir.builder import Builder, Value
from axon_eg.ir.interpret import interpret
from axon_eg.ir.program import Program
from axon_eg.semantics.prover import prove_equal
from axon_eg.testing.emitter import Emitter

E = Emitter  # e.log(x) emits an op, e.c(1.0) a constant


@dataclass(frozen=True)
class Identity:
    name: str
    kind: str
    inputs: dict[str, Any]  # name -> shape, or (shape, dtype)
    lhs: Callable[..., Value]
    rhs: Callable[..., Value]
    witness: dict[str, Any] = field(default_factory=dict)  # {"dims": {...}, input name: values}: the sides differ

    def programs(self) -> tuple[Program, Program]:
        return _program(self.inputs, self.lhs), _program(self.inputs, self.rhs)


def _program(inputs: dict[str, Any], body: Callable[..., Value]) -> Program:
    b = Builder("planted")
    values = {}
    for name, spec in inputs.items():
        shape, dtype = spec if len(spec) == 2 and spec[1] in ("int32", "bool") else (spec, "fp32")
        values[name] = b.input(name, shape, dtype)
    return b.build(body(E(b), **values)).expand()


X, XY, AB = {"x": ("N",)}, {"x": ("N",), "y": ("N",)}, {"a": ("N",), "b": ("N",)}
MN, NN = {"x": ("M", "N")}, {"x": ("N", "N")}
MASK = {"m": (("N",), "bool"), "x": ("N",), "y": ("N",)}
I32 = {"x": (("N",), "int32")}


def at(dims: dict[str, int] | None = None, **values: Any) -> dict[str, Any]:
    return {"dims": dims or {"N": len(next(iter(values.values())))}, **values}


FALSE = [
    # -- domains ----------------------------------------------------------------------------------
    Identity("exp inverts log", "domain", X, lambda e, x: e.exp(e.log(x)), lambda e, x: x, at(x=[-1.0])),
    Identity("sqrt squared", "domain", X, lambda e, x: e.mul(e.sqrt(x), e.sqrt(x)), lambda e, x: x, at(x=[-1.0])),
    Identity("log of a product", "domain", XY, lambda e, x, y: e.log(e.mul(x, y)),
             lambda e, x, y: e.add(e.log(x), e.log(y)), at(x=[-1.0], y=[-2.0])),
    Identity("sqrt of a product", "domain", XY, lambda e, x, y: e.sqrt(e.mul(x, y)),
             lambda e, x, y: e.mul(e.sqrt(x), e.sqrt(y)), at(x=[-1.0], y=[-2.0])),
    Identity("x / x is 1", "domain", XY, lambda e, x, y: e.mul(e.div(x, x), y), lambda e, x, y: y, at(x=[0.0], y=[1.0])),
    Identity("x y / y is x", "domain", XY, lambda e, x, y: e.div(e.mul(x, y), y), lambda e, x, y: x, at(x=[1.0], y=[0.0])),
    Identity("reciprocal involution", "domain", X, lambda e, x: e.reciprocal(e.reciprocal(x)), lambda e, x: x),
    Identity("rsqrt squared is the reciprocal", "domain", X, lambda e, x: e.mul(e.rsqrt(x), e.rsqrt(x)),
             lambda e, x: e.reciprocal(x), at(x=[-1.0])),
    Identity("sqrt of a square", "domain", X, lambda e, x: e.pow(e.pow(x, exponent=2.0), exponent=0.5), lambda e, x: x,
             at(x=[-1.0])),
    Identity("sqrt over itself", "domain", X, lambda e, x: e.div(e.sqrt(x), e.sqrt(x)), lambda e, x: e.add(e.mul(x, e.c(0.0)),
                                                                                                         e.c(1.0)),
             at(x=[-1.0])),
    Identity("a quotient times its divisor", "domain", XY, lambda e, x, y: e.mul(e.div(x, y), y), lambda e, x, y: x,
             at(x=[1.0], y=[0.0])),
    Identity("sqrt of a relu", "domain", X, lambda e, x: e.sqrt(e.relu(x)), lambda e, x: e.relu(e.sqrt(x)), at(x=[-1.0])),
    Identity("log of a square is twice the log", "domain", X, lambda e, x: e.log(e.square(x)),
             lambda e, x: e.mul(e.log(x), e.c(2.0)), at(x=[-1.0])),
    Identity("pow 1.5 of a square", "domain", X, lambda e, x: e.pow(e.square(x), exponent=1.5),
             lambda e, x: e.mul(e.square(x), e.pow(x, exponent=1.0)), at(x=[-2.0])),
    Identity("reciprocal of a relu", "domain", X, lambda e, x: e.reciprocal(e.maximum(x, e.c(0.0))),
             lambda e, x: e.relu(e.reciprocal(x)), at(x=[-1.0])),
    Identity("max of sqrts", "domain", MN, lambda e, x: e.max(e.sqrt(x), axes=(1,)), lambda e, x: e.sqrt(e.max(x, axes=(1,))),
             at({"M": 1, "N": 2}, x=[[-1.0, 4.0]])),
    Identity("logsumexp of logs", "domain", MN, lambda e, x: e.logsumexp(e.log(x), axes=(1,)),
             lambda e, x: e.log(e.sum(x, axes=(1,))), at({"M": 1, "N": 2}, x=[[-1.0, 4.0]])),
    Identity("sum of reciprocal involutions", "domain", MN, lambda e, x: e.sum(e.reciprocal(e.reciprocal(x)), axes=(1,)),
             lambda e, x: e.sum(x, axes=(1,))),
    Identity("pow -1 of a product", "domain", XY, lambda e, x, y: e.mul(e.pow(e.mul(x, y), exponent=-1.0), y),
             lambda e, x, y: e.reciprocal(x), at(x=[1.0], y=[0.0])),
    Identity("division by a broadcast column", "domain", {"x": ("N", "N"), "y": ("N",)},
             lambda e, x, y: e.mul(e.div(x, y), y), lambda e, x, y: x, at(x=[[1.0]], y=[0.0])),
    # -- NaN and infinities swallowed on one side --------------------------------------------------
    Identity("where(log x > 0, log x, 0) is relu(log x)", "nan", X,
             lambda e, x: e.where(e.gt(e.log(x), e.c(0.0)), e.log(x), e.c(0.0)), lambda e, x: e.relu(e.log(x)),
             at(x=[-1.0])),
    Identity("pow(sqrt x, 0) is sqrt x * 0 + 1", "nan", X, lambda e, x: e.pow(e.sqrt(x), exponent=0.0),
             lambda e, x: e.add(e.mul(e.sqrt(x), e.c(0.0)), e.c(1.0)), at(x=[-1.0])),
    Identity("log x * 0 is 0", "nan", X, lambda e, x: e.mul(e.log(x), e.c(0.0)), lambda e, x: e.mul(x, e.c(0.0)),
             at(x=[-1.0])),
    Identity("sqrt x - sqrt x is 0", "nan", X, lambda e, x: e.sub(e.sqrt(x), e.sqrt(x)), lambda e, x: e.sub(x, x),
             at(x=[-1.0])),
    Identity("relu of a log is the log of a max with 1", "nan", X, lambda e, x: e.relu(e.log(x)),
             lambda e, x: e.log(e.maximum(x, e.c(1.0))), at(x=[-1.0])),
    Identity("tanh(1/x) plus a zero multiple of 1/x", "nan", X, lambda e, x: e.tanh(e.reciprocal(x)),
             lambda e, x: e.add(e.tanh(e.reciprocal(x)), e.mul(e.reciprocal(x), e.c(0.0))), at(x=[0.0])),
    Identity("relu(log x) plus a zero multiple of log x", "nan", X, lambda e, x: e.relu(e.log(x)),
             lambda e, x: e.add(e.relu(e.log(x)), e.mul(e.log(x), e.c(0.0))), at(x=[0.0])),
    Identity("a comparison of a log is a comparison of its argument", "nan", X,
             lambda e, x: e.cast(e.gt(e.log(x), e.c(-1.0)), dtype="fp32"),
             lambda e, x: e.add(e.cast(e.gt(e.log(x), e.c(-1.0)), dtype="fp32"), e.mul(e.log(x), e.c(0.0))),
             at(x=[-1.0])),
    Identity("sigmoid of a log", "nan", X, lambda e, x: e.sigmoid(e.log(x)), lambda e, x: e.div(x, e.add(x, e.c(1.0))),
             at(x=[-0.5])),
    Identity("exp of a negated reciprocal", "nan", X, lambda e, x: e.exp(e.neg(e.reciprocal(e.square(x)))),
             lambda e, x: e.mul(e.exp(e.neg(e.reciprocal(e.square(x)))), e.add(e.mul(e.reciprocal(x), e.c(0.0)), e.c(1.0))),
             at(x=[0.0])),
    Identity("max of logs under a relu", "nan", MN, lambda e, x: e.max(e.log(x), axes=(1,)),
             lambda e, x: e.add(e.max(e.log(x), axes=(1,)), e.sum(e.mul(e.log(x), e.c(0.0)), axes=(1,))),
             at({"M": 1, "N": 2}, x=[[0.0, 2.0]])),
    Identity("clamp of a reciprocal", "nan", X, lambda e, x: e.clamp(e.reciprocal(x), lo=-1.0, hi=1.0),
             lambda e, x: e.mul(e.clamp(e.reciprocal(x), lo=-1.0, hi=1.0), e.mul(x, e.reciprocal(x))), at(x=[0.0])),
    Identity("< is 1 - >= on a NaN", "nan", X, lambda e, x: e.cast(e.lt(e.sqrt(x), e.c(1.0)), dtype="fp32"),
             lambda e, x: e.sub(e.c(1.0), e.cast(e.ge(e.sqrt(x), e.c(1.0)), dtype="fp32")), at(x=[-1.0])),
    Identity("cast of a NaN to bool", "nan", X, lambda e, x: e.cast(e.cast(e.log(x), dtype="bool"), dtype="fp32"),
             lambda e, x: e.add(e.cast(e.cast(e.log(x), dtype="bool"), dtype="fp32"), e.mul(e.log(x), e.c(0.0))),
             at(x=[-1.0])),
    # -- signed zero ------------------------------------------------------------------------------
    Identity("rsqrt of a min", "signed zero", XY, lambda e, x, y: e.rsqrt(e.minimum(x, y)),
             lambda e, x, y: e.maximum(e.rsqrt(x), e.rsqrt(y)), at(x=[-0.0], y=[1.0])),
    Identity("relu(1 / -(a - b)) is relu(1 / (b - a))", "signed zero", AB,
             lambda e, a, b: e.relu(e.reciprocal(e.neg(e.sub(a, b)))), lambda e, a, b: e.relu(e.reciprocal(e.sub(b, a))),
             at(a=[1.0], b=[1.0])),
    Identity("exp(1 / -(a - b)) is exp(1 / (b - a))", "signed zero", AB,
             lambda e, a, b: e.exp(e.reciprocal(e.neg(e.sub(a, b)))), lambda e, a, b: e.exp(e.reciprocal(e.sub(b, a))),
             at(a=[1.0], b=[1.0])),
    Identity("exp(1 / (x + 0)) is exp(1 / x)", "signed zero", X, lambda e, x: e.exp(e.reciprocal(e.add(x, e.c(0.0)))),
             lambda e, x: e.exp(e.reciprocal(x)), at(x=[-0.0])),
    Identity("relu of rsqrt is rsqrt", "signed zero", X, lambda e, x: e.relu(e.rsqrt(x)), lambda e, x: e.rsqrt(x),
             at(x=[-0.0])),
    Identity("max of rsqrt and 0 is rsqrt", "signed zero", X, lambda e, x: e.maximum(e.rsqrt(x), e.c(0.0)),
             lambda e, x: e.rsqrt(x), at(x=[-0.0])),
    Identity("sigmoid(1 / (x * 1)) is sigmoid(1 / x) times a zero test", "signed zero", X,
             lambda e, x: e.sigmoid(e.reciprocal(x)),
             lambda e, x: e.mul(e.sigmoid(e.reciprocal(x)), e.add(e.mul(e.reciprocal(x), e.c(0.0)), e.c(1.0))),
             at(x=[-0.0])),
    Identity("min with a reciprocal of a negated zero", "signed zero", AB,
             lambda e, a, b: e.minimum(e.reciprocal(e.sub(a, b)), e.c(0.0)),
             lambda e, a, b: e.neg(e.relu(e.reciprocal(e.sub(b, a)))), at(a=[1.0], b=[1.0])),
    # -- integers, truncation and floor -------------------------------------------------------------
    Identity("a cast to int is the floor", "integer", X, lambda e, x: e.cast(e.cast(x, dtype="int32"), dtype="fp32"),
             lambda e, x: e.floor(x), at(x=[-1.5])),
    Identity("truncation is the floor", "integer", X, lambda e, x: e.trunc(x), lambda e, x: e.floor(x), at(x=[-1.5])),
    Identity("floor is odd", "integer", X, lambda e, x: e.floor(e.neg(x)), lambda e, x: e.neg(e.floor(x)), at(x=[1.5])),
    Identity("halving and doubling an integer", "integer", I32,
             lambda e, x: e.mul(e.floor(e.div(e.cast(x, dtype="fp32"), e.c(2.0))), e.c(2.0)),
             lambda e, x: e.cast(x, dtype="fp32"), at(x=np.array([3], dtype=np.int32))),
    Identity("floor division is truncating division", "integer", {"a": (("N",), "int32"), "b": (("N",), "int32")},
             lambda e, a, b: e.floor(e.div(e.cast(a, dtype="fp32"), e.cast(b, dtype="fp32"))),
             lambda e, a, b: e.cast(e.cast(e.div(e.cast(a, dtype="fp32"), e.cast(b, dtype="fp32")), dtype="int32"),
                                    dtype="fp32"),
             at(a=np.array([-7], dtype=np.int32), b=np.array([2], dtype=np.int32))),
    Identity("round is floor of x + 1/2", "integer", X, lambda e, x: e.round(x), lambda e, x: e.floor(e.add(x, e.c(0.5))),
             at(x=[0.5])),
    Identity("ceil is floor plus one", "integer", X, lambda e, x: e.ceil(x), lambda e, x: e.add(e.floor(x), e.c(1.0)),
             at(x=[2.0])),
    Identity("reshape is a transpose", "integer", {"x": ("M", "N")},
             lambda e, x: e.reshape(x, shape=("N", "M")), lambda e, x: e.transpose(x, perm=(1, 0)),
             at({"M": 2, "N": 3}, x=[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])),
    Identity("flatten in the other order", "integer", {"x": ("M", "N")},
             lambda e, x: e.reshape(x, shape=(D.mul(D.sym("M"), D.sym("N")),)),
             lambda e, x: e.reshape(e.transpose(x, perm=(1, 0)), shape=(D.mul(D.sym("M"), D.sym("N")),)),
             at({"M": 2, "N": 2}, x=[[0.0, 1.0], [2.0, 3.0]])),
    Identity("an integer sum is its mean", "integer", {"x": (("N",), "int32")},
             lambda e, x: e.cast(e.sum(x), dtype="fp32"), lambda e, x: e.mean(e.cast(x, dtype="fp32")),
             at(x=np.array([1, 2], dtype=np.int32))),
    Identity(">= is > on integers", "integer", I32, lambda e, x: e.ge(x, e.c(3.0)), lambda e, x: e.gt(x, e.c(3.0)),
             at(x=np.array([3], dtype=np.int32))),
    # -- broadcasting ------------------------------------------------------------------------------
    Identity("a row vector added as a column", "broadcast", {"x": ("N", "N"), "v": ("N",)},
             lambda e, x, v: e.add(x, v), lambda e, x, v: e.add(x, e.expand_dims(v, axis=1)),
             at(x=[[0.0, 0.0], [0.0, 0.0]], v=[1.0, 2.0])),
    Identity("a row vector multiplied as a column", "broadcast", {"x": ("N", "N"), "v": ("N",)},
             lambda e, x, v: e.mul(x, e.expand_dims(v, axis=0)), lambda e, x, v: e.mul(x, e.reshape(v, shape=("N", 1))),
             at(x=[[1.0, 1.0], [1.0, 1.0]], v=[1.0, 2.0])),
    Identity("a sum of broadcast copies is the vector", "broadcast", {"x": ("N",), "y": ("M", "N")},
             lambda e, x, y: e.sum(e.add(x, y), axes=(0,)), lambda e, x, y: e.add(x, e.sum(y, axes=(0,))),
             at({"M": 2, "N": 1}, x=[1.0], y=[[0.0], [0.0]])),
    Identity("a broadcast column is a broadcast row", "broadcast", {"x": ("N", 1)},
             lambda e, x: e.broadcast_to(x, shape=("N", "N")),
             lambda e, x: e.transpose(e.broadcast_to(x, shape=("N", "N")), perm=(1, 0)), at(x=[[1.0], [2.0]])),
    Identity("a mask broadcast along the wrong axis", "broadcast", {"m": (("N", 1), "bool"), "x": ("N", "N")},
             lambda e, m, x: e.where(m, x, e.c(0.0)), lambda e, m, x: e.where(e.reshape(m, shape=(1, "N")), x, e.c(0.0)),
             at(m=np.array([[True], [False]]), x=[[1.0, 1.0], [1.0, 1.0]])),
    Identity("a max over the broadcast axis", "broadcast", {"x": ("N", 1)},
             lambda e, x: e.max(e.broadcast_to(x, shape=("N", "N")), axes=(0,)), lambda e, x: e.squeeze(x, axes=(1,)),
             at(x=[[1.0], [2.0]])),
    Identity("division by a column broadcast as a row", "broadcast", {"x": ("N", "N"), "y": ("N", 1)},
             lambda e, x, y: e.div(x, y), lambda e, x, y: e.div(x, e.reshape(y, shape=(1, "N"))),
             at(x=[[1.0, 1.0], [1.0, 1.0]], y=[[1.0], [2.0]])),
    # -- reductions over the wrong axis -------------------------------------------------------------
    Identity("sum over the other axis", "axis", NN, lambda e, x: e.sum(x, axes=(0,)), lambda e, x: e.sum(x, axes=(1,)),
             at(x=[[1.0, 2.0], [3.0, 4.0]])),
    Identity("max over the other axis", "axis", NN, lambda e, x: e.max(x, axes=(0,)), lambda e, x: e.max(x, axes=(1,)),
             at(x=[[1.0, 2.0], [3.0, 4.0]])),
    Identity("mean over the other axis", "axis", NN, lambda e, x: e.mean(x, axes=(0,)), lambda e, x: e.mean(x, axes=(1,)),
             at(x=[[1.0, 2.0], [3.0, 4.0]])),
    Identity("logsumexp over the other axis", "axis", NN, lambda e, x: e.logsumexp(x, axes=(0,)),
             lambda e, x: e.logsumexp(x, axes=(1,)), at(x=[[1.0, 2.0], [3.0, 4.0]])),
    Identity("softmax over the other axis", "axis", NN, lambda e, x: e.softmax(x, axis=0), lambda e, x: e.softmax(x, axis=1),
             at(x=[[1.0, 2.0], [3.0, 5.0]])),
    Identity("cumsum over the other axis", "axis", NN, lambda e, x: e.cumsum(x, axis=0), lambda e, x: e.cumsum(x, axis=1),
             at(x=[[1.0, 2.0], [3.0, 4.0]])),
    Identity("a transposed sum over the same axis", "axis", NN, lambda e, x: e.sum(e.transpose(x, perm=(1, 0)), axes=(0,)),
             lambda e, x: e.sum(x, axes=(0,)), at(x=[[1.0, 2.0], [3.0, 4.0]])),
    Identity("a column sum into the wrong matmul operand", "axis", {"A": ("N", "N"), "B": ("N", "N")},
             lambda e, A, B: e.sum(e.matmul(A, B), axes=(0,)),
             lambda e, A, B: e.squeeze(e.matmul(A, e.sum(B, axes=(1,), keepdims=True)), axes=(1,)),
             at(A=[[1.0, 2.0], [3.0, 4.0]], B=[[1.0, 0.0], [0.0, 2.0]])),
    Identity("argmax over the other axis", "axis", NN, lambda e, x: e.argmax(x, axes=(0,)), lambda e, x: e.argmax(x, axes=(1,)),
             at(x=[[1.0, 2.0], [0.0, 3.0]])),
    Identity("min of a row max", "axis", NN, lambda e, x: e.min(e.max(x, axes=(1,)), axes=(0,)),
             lambda e, x: e.max(e.min(x, axes=(0,)), axes=(0,)), at(x=[[1.0, 4.0], [3.0, 2.0]])),
    Identity("sum of a product of transposes", "axis", {"a": ("N", "N"), "b": ("N", "N")},
             lambda e, a, b: e.sum(e.mul(a, b), axes=(1,)),
             lambda e, a, b: e.sum(e.mul(e.transpose(a, perm=(1, 0)), e.transpose(b, perm=(1, 0))), axes=(1,)),
             at(a=[[1.0, 2.0], [3.0, 4.0]], b=[[1.0, 1.0], [1.0, 1.0]])),
    # -- where and comparisons ----------------------------------------------------------------------
    Identity("where(x < -4, 7, sqrt x) is where(x < -4, 8, sqrt x)", "where", X,
             lambda e, x: e.where(e.lt(x, e.c(-4.0)), e.c(7.0), e.sqrt(x)),
             lambda e, x: e.where(e.lt(x, e.c(-4.0)), e.c(8.0), e.sqrt(x)), at(x=[-5.0])),
    Identity("sqrt x is where(x < -4, 0, sqrt x)", "where", X, lambda e, x: e.sqrt(x),
             lambda e, x: e.where(e.lt(x, e.c(-4.0)), e.c(0.0), e.sqrt(x)), at(x=[-5.0])),
    Identity("log x is where(x == -1.5, 0, log x)", "where", X, lambda e, x: e.log(x),
             lambda e, x: e.where(e.eq(x, e.c(-1.5)), e.c(0.0), e.log(x)), at(x=[-1.5])),
    Identity("where(x < -4, 7, x) is x", "where", X, lambda e, x: e.where(e.lt(x, e.c(-4.0)), e.c(7.0), x), lambda e, x: x,
             at(x=[-5.0])),
    Identity("a relu with the wrong threshold", "where", X, lambda e, x: e.where(e.lt(x, e.c(1.0)), e.c(0.0), x),
             lambda e, x: e.relu(x), at(x=[0.5])),
    Identity("minimum as a where", "where", XY, lambda e, x, y: e.minimum(x, y), lambda e, x, y: e.where(e.gt(x, y), x, y),
             at(x=[2.0], y=[1.0])),
    Identity(">= is >", "where", X, lambda e, x: e.ge(x, e.c(3.0)), lambda e, x: e.gt(x, e.c(3.0)), at(x=[3.0])),
    Identity("<= is <", "where", XY, lambda e, x, y: e.le(x, y), lambda e, x, y: e.lt(x, y), at(x=[1.0], y=[1.0])),
    Identity("swapped branches", "where", MASK, lambda e, m, x, y: e.where(m, x, y), lambda e, m, x, y: e.where(m, y, x),
             at(m=np.array([True]), x=[1.0], y=[2.0])),
    Identity("where(x > 0, log x, 0) is where(x > 0, log x, 1)", "where", X,
             lambda e, x: e.where(e.gt(x, e.c(0.0)), e.log(x), e.c(0.0)),
             lambda e, x: e.where(e.gt(x, e.c(0.0)), e.log(x), e.c(1.0)), at(x=[-1.0])),
    Identity("where(x > 1, log x, 0) is relu(log x)", "where", X,
             lambda e, x: e.where(e.gt(x, e.c(1.0)), e.log(x), e.c(0.0)), lambda e, x: e.relu(e.log(x)), at(x=[-1.0])),
    Identity("a guard that does not protect its branch", "where", X,
             lambda e, x: e.where(e.gt(x, e.c(-1.0)), e.sqrt(x), e.c(0.0)),
             lambda e, x: e.where(e.gt(x, e.c(0.0)), e.sqrt(x), e.c(0.0)), at(x=[-0.5])),
    Identity("a guarded reciprocal is the reciprocal", "where", X,
             lambda e, x: e.where(e.eq(x, e.c(0.0)), e.c(0.0), e.reciprocal(x)), lambda e, x: e.reciprocal(x), at(x=[0.0])),
    Identity("a clamp is a relu", "where", X, lambda e, x: e.clamp(x, lo=0.0, hi=6.0), lambda e, x: e.relu(x), at(x=[7.0])),
    Identity("a max with a constant is a relu", "where", X, lambda e, x: e.maximum(x, e.c(-2.0)), lambda e, x: e.relu(x),
             at(x=[-1.0])),
]

TRUE = [
    Identity("log inverts exp", "domain", X, lambda e, x: e.log(e.exp(x)), lambda e, x: x),
    Identity("rsqrt is the reciprocal of sqrt", "domain", X, lambda e, x: e.rsqrt(x), lambda e, x: e.reciprocal(e.sqrt(x))),
    Identity("sqrt is pow 0.5", "domain", X, lambda e, x: e.sqrt(x), lambda e, x: e.pow(x, exponent=0.5)),
    Identity("reciprocal is pow -1", "domain", X, lambda e, x: e.reciprocal(x), lambda e, x: e.pow(x, exponent=-1.0)),
    Identity("division distributes over add", "domain", {"a": ("N",), "b": ("N",), "c": ("N",)},
             lambda e, a, b, c: e.div(e.add(a, b), c), lambda e, a, b, c: e.add(e.div(a, c), e.div(b, c))),
    Identity("reciprocal of a product", "domain", XY, lambda e, x, y: e.reciprocal(e.mul(x, y)),
             lambda e, x, y: e.mul(e.reciprocal(x), e.reciprocal(y))),
    Identity("log of a min", "nan", XY, lambda e, x, y: e.log(e.minimum(x, y)), lambda e, x, y: e.minimum(e.log(x), e.log(y))),
    Identity("min of a log with 0 is a negated relu", "nan", X, lambda e, x: e.minimum(e.log(x), e.c(0.0)),
             lambda e, x: e.neg(e.relu(e.neg(e.log(x))))),
    Identity("sum of logs through a transpose", "nan", MN, lambda e, x: e.sum(e.log(e.transpose(x, perm=(1, 0))), axes=(0,)),
             lambda e, x: e.sum(e.log(x), axes=(1,))),
    Identity("x * 0 is 0", "signed zero", X, lambda e, x: e.mul(x, e.c(0.0)), lambda e, x: e.sub(x, x)),
    Identity("-(a - b) is b - a", "signed zero", AB, lambda e, a, b: e.neg(e.sub(a, b)), lambda e, a, b: e.sub(b, a)),
    Identity("x + 0 is x", "signed zero", X, lambda e, x: e.add(x, e.c(0.0)), lambda e, x: x),
    Identity("1 / -x is -(1 / x)", "signed zero", X, lambda e, x: e.reciprocal(e.neg(x)), lambda e, x: e.neg(e.reciprocal(x))),
    Identity("a truncating cast through a transpose", "integer", MN,
             lambda e, x: e.cast(e.transpose(x, perm=(1, 0)), dtype="int32"),
             lambda e, x: e.transpose(e.cast(x, dtype="int32"), perm=(1, 0))),
    Identity("integer addition commutes", "integer", {"a": (("N",), "int32"), "b": (("N",), "int32")},
             lambda e, a, b: e.add(a, b), lambda e, a, b: e.add(b, a)),
    Identity("a mean of broadcast copies is the vector", "broadcast", {"x": ("N",), "y": ("M", "N")},
             lambda e, x, y: e.mean(e.add(x, y), axes=(0,)), lambda e, x, y: e.add(x, e.mean(y, axes=(0,)))),
    Identity("a row vector through expand_dims", "broadcast", {"x": ("N", "N"), "v": ("N",)},
             lambda e, x, v: e.add(x, e.expand_dims(v, axis=0)), lambda e, x, v: e.add(x, v)),
    Identity("a sum over both axes in two steps", "axis", MN, lambda e, x: e.sum(x, axes=(0, 1)),
             lambda e, x: e.sum(e.sum(x, axes=(1,)), axes=(0,))),
    Identity("a max over both axes in two steps", "axis", MN, lambda e, x: e.max(x, axes=(0, 1)),
             lambda e, x: e.max(e.max(x, axes=(0,)), axes=(0,))),
    Identity("relu as a where", "where", X, lambda e, x: e.where(e.lt(x, e.c(0.0)), e.c(0.0), x), lambda e, x: e.relu(x)),
    Identity("abs as a where", "where", X, lambda e, x: e.where(e.gt(x, e.c(0.0)), x, e.neg(x)), lambda e, x: e.abs(x)),
    Identity("maximum as a where", "where", XY, lambda e, x, y: e.maximum(x, y), lambda e, x, y: e.where(e.gt(x, y), x, y)),
    Identity("where with a negated mask", "where", MASK, lambda e, m, x, y: e.where(m, x, y),
             lambda e, m, x, y: e.where(e.logical_not(m), y, x)),
    Identity("log through a where", "where", MASK, lambda e, m, x, y: e.where(m, e.log(x), e.log(y)),
             lambda e, m, x, y: e.log(e.where(m, x, y))),
    Identity("a guarded sqrt on both sides of 0", "where", X,
             lambda e, x: e.where(e.gt(x, e.c(0.0)), e.sqrt(x), e.sqrt(e.neg(x))), lambda e, x: e.sqrt(e.abs(x))),
    Identity("a guarded log is defined everywhere", "where", X,
             lambda e, x: e.where(e.gt(x, e.c(0.0)), e.log(x), e.c(0.0)),
             lambda e, x: e.where(e.le(x, e.c(0.0)), e.c(0.0), e.log(x))),
    Identity("a comparison read backwards", "where", XY, lambda e, x, y: e.lt(x, y), lambda e, x, y: e.gt(y, x)),
]


def test_the_battery_is_large_and_covers_every_kind() -> None:
    assert len(FALSE) >= 60 and len(TRUE) >= 20
    assert {i.kind for i in FALSE} == {"domain", "nan", "signed zero", "integer", "broadcast", "axis", "where"}
    assert len({i.name for i in FALSE + TRUE}) == len(FALSE) + len(TRUE)


def _differ(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape:
        return True
    fa, fb = np.isfinite(a), np.isfinite(b)
    return not np.array_equal(fa, fb) or not np.allclose(a[fa], b[fa], rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("identity", [i for i in FALSE if i.witness], ids=lambda i: i.name)
def test_the_witness_tells_the_sides_apart(identity: Identity) -> None:
    """The false identities are false: the float64 reference differs at the witness."""
    lhs, rhs = identity.programs()
    dims = identity.witness["dims"]
    left, right = lhs.bind(dims), rhs.bind(dims)
    inputs = {k: np.asarray(v, dtype=np.float64) for k, v in identity.witness.items() if k != "dims"}
    with np.errstate(all="ignore"):
        a, b = np.asarray(interpret(left, inputs)), np.asarray(interpret(right, inputs))
    assert _differ(a, b), f"{identity.name}: {a} vs {b} at {inputs}"


@pytest.mark.parametrize("identity", FALSE, ids=lambda i: i.name)
def test_a_false_identity_is_never_proved(identity: Identity) -> None:
    lhs, rhs = identity.programs()
    result = prove_equal(lhs, rhs, timeout_ms=1000)
    assert result.status != "proven", f"{identity.name} ({identity.kind}): proved by {result.method}"
    symbolic = prove_equal(lhs, rhs, numeric=False, timeout_ms=1000)
    assert symbolic.status != "proven", f"{identity.name} ({identity.kind}): the symbolic path proves it ({symbolic.method})"


@pytest.mark.parametrize("identity", TRUE, ids=lambda i: i.name)
def test_a_true_identity_is_proved(identity: Identity) -> None:
    lhs, rhs = identity.programs()
    result = prove_equal(lhs, rhs, timeout_ms=2000)
    assert result.proven, f"{identity.name} ({identity.kind}): {result.status} by {result.method}: {result.detail}"


def test_the_issue_48_guards_are_refuted_with_a_guarded_input() -> None:
    """The NumPy search reaches the region a guard selects (x < -4, x == -1.5) and names it."""
    for name in ("where(x < -4, 7, sqrt x) is where(x < -4, 8, sqrt x)", "sqrt x is where(x < -4, 0, sqrt x)",
                 "log x is where(x == -1.5, 0, log x)"):
        lhs, rhs = next(i for i in FALSE if i.name == name).programs()
        result = prove_equal(lhs, rhs)
        assert result.status == "refuted" and result.counterexample is not None, (name, result)
        assert result.counterexample.inputs == "guards", (name, result.detail)


def test_a_side_finite_where_its_domain_fails_is_unknown() -> None:
    """Equal domains, equal values on them, but the lhs is 0 where log x is NaN: the symbolic path says why."""
    identity = next(i for i in FALSE if i.name == "where(log x > 0, log x, 0) is relu(log x)")
    result = prove_equal(*identity.programs(), numeric=False)
    assert result.status == "unknown" and result.method == "nan", result
    assert result.detail.startswith("the lhs may be finite where its domain fails (gt of"), result.detail


def test_the_witnesses_negative_zero_is_a_signed_zero() -> None:
    with np.errstate(divide="ignore"):
        assert math.copysign(1.0, np.asarray([-0.0])[0]) < 0 and 1.0 / np.asarray([-0.0]) == -np.inf
