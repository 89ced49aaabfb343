"""Properties of symbolic dims (axon_eg.ir.dims): canonical polynomial forms, evaluation as a ring
homomorphism, floor and ceil division against Python's, str/parse round trips, exact division by a
monomial, and errors that name the dim."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from axon_eg.errors import ShapeError
from axon_eg.ir import dims as D
from axon_eg.testing import DIM_NAMES, DimExpr, dim_expressions, dims_and_sizes

exprs = dim_expressions()  # with floor divisions
polys = dim_expressions(floordiv=False)
positive = dim_expressions(positive=True)
sizes = dims_and_sizes().map(lambda pair: pair[1])
wide_sizes = st.fixed_dictionaries({n: st.integers(1, 10**6) for n in DIM_NAMES})
M, N, K, B = (D.sym(n) for n in DIM_NAMES)


@st.composite
def monomials(draw: st.DrawFn) -> D.Dim:
    """c * a * b ... with a nonzero coefficient (possibly negative) and 0-3 named factors."""
    factors = draw(st.lists(st.sampled_from([M, N, K, B]), max_size=3))
    return D.product([draw(st.sampled_from((1, 2, 3, -1, -2))), *factors])


# -- canonical forms -----------------------------------------------------------------------------
@given(exprs, exprs, exprs)
def test_ring_laws_give_identical_dims(a: DimExpr, b: DimExpr, c: DimExpr) -> None:
    x, y, z = a.dim(), b.dim(), c.dim()
    assert D.add(x, y) == D.add(y, x) and hash(D.add(x, y)) == hash(D.add(y, x))
    assert D.mul(x, y) == D.mul(y, x)
    assert D.add(D.add(x, y), z) == D.add(x, D.add(y, z))
    assert D.mul(D.mul(x, y), z) == D.mul(x, D.mul(y, z))
    assert D.mul(x, D.add(y, z)) == D.add(D.mul(x, y), D.mul(x, z))
    assert D.add(x, 0) == x and D.mul(x, 1) == x and D.mul(x, 0) == 0
    assert D.add(x, D.mul(x, -1)) == 0
    assert x + y - y == x  # the operators of Sym agree with the functions


@given(exprs, st.integers(-5, 5))
def test_dims_that_are_constant_are_plain_ints(a: DimExpr, k: int) -> None:
    x = a.dim()
    shifted = D.add(D.add(x, k), D.mul(x, -1))
    assert shifted == k and type(shifted) is int


# -- evaluation ----------------------------------------------------------------------------------
@given(exprs, exprs, sizes)
def test_evaluate_is_a_ring_homomorphism(a: DimExpr, b: DimExpr, bound: dict[str, int]) -> None:
    x, y = a.dim(), b.dim()
    ex, ey = D.evaluate(x, bound), D.evaluate(y, bound)
    assert ex == a.value(bound) and ey == b.value(bound)
    assert D.evaluate(D.add(x, y), bound) == ex + ey
    assert D.evaluate(D.mul(x, y), bound) == ex * ey
    assert D.evaluate(D.add(x, D.mul(y, -1)), bound) == ex - ey
    assert D.evaluate(D.product([x, y, x]), bound) == ex * ey * ex


@given(exprs, st.one_of(positive, polys, st.integers(-6, 6).map(lambda i: DimExpr("int", (i,)))),
       st.one_of(sizes, wide_sizes))
def test_floordiv_agrees_with_python(a: DimExpr, b: DimExpr, bound: dict[str, int]) -> None:
    num, den = a.dim(), b.dim()
    en, ed = D.evaluate(num, bound), D.evaluate(den, bound)
    assume(ed != 0)
    assert D.evaluate(D.floordiv(num, den), bound) == en // ed


@given(exprs, st.one_of(positive, st.integers(1, 6).map(lambda i: DimExpr("int", (i,)))), st.one_of(sizes, wide_sizes))
def test_ceildiv_agrees_with_python_for_positive_divisors(a: DimExpr, b: DimExpr, bound: dict[str, int]) -> None:
    num, den = a.dim(), b.dim()
    en, ed = D.evaluate(num, bound), D.evaluate(den, bound)
    assert D.evaluate(D.ceildiv(num, den), bound) == -(-en // ed)


@given(exprs, sizes, st.sets(st.sampled_from(DIM_NAMES)))
def test_partial_substitution_then_evaluation_is_evaluation(a: DimExpr, bound: dict[str, int], early: set[str]) -> None:
    x = a.dim()
    partial = D.substitute(x, {n: bound[n] for n in early})
    assert D.names(partial) <= D.names(x) - early
    assert D.evaluate(partial, bound) == D.evaluate(x, bound)


# -- printing and parsing ------------------------------------------------------------------------
@given(exprs)
def test_parse_dim_inverts_str(a: DimExpr) -> None:
    x = a.dim()
    assert D.parse_dim(str(x)) == x
    assert D.parse_dim(f" ({x}) ") == x


@given(positive)
def test_as_dim_accepts_what_str_prints(a: DimExpr) -> None:
    x = a.dim()
    assert D.as_dim(str(x)) == x and D.as_dim(x) == x


# -- exact division ------------------------------------------------------------------------------
@given(polys, monomials())
def test_dividing_by_a_monomial_factor_is_exact(a: DimExpr, mono: D.Dim) -> None:
    x = a.dim()
    assert D.floordiv(D.mul(x, mono), mono) == x


def test_exact_division_examples() -> None:
    H, G = D.sym("H"), D.sym("G")
    assert D.floordiv(H * G, H) == G
    assert D.floordiv(2 * H * G + 4 * H, 2 * H) == G + 2
    assert D.floordiv((M + 1) * N, N) == M + 1
    assert D.floordiv(M, M) == 1
    assert D.floordiv(6 * M + 3, 3) == 2 * M + 1
    assert isinstance(D.floordiv(M + 1, 2), D.Sym) and "//" in str(D.floordiv(M + 1, 2))  # not exact: kept


# -- errors name the dim -------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["1M", "M-1", "", "M N", "a.b", "M*"])
def test_bad_names_are_refused_naming_them(name: str) -> None:
    with pytest.raises(ShapeError, match=re.escape(repr(name))):
        D.sym(name)


@pytest.mark.parametrize("value", [-1, -3, "-3", "2 - 5"])
def test_negative_dims_are_refused_naming_the_value(value: object) -> None:
    with pytest.raises(ShapeError, match=r">= 0, got -\d"):
        D.as_dim(value)


@pytest.mark.parametrize("value", [True, 2.5, 3.0, None, [1], "M +", "M ** 2", "f(M)", "M / 2", "1.5"])
def test_things_that_are_not_dims_are_refused_naming_them(value: object) -> None:
    with pytest.raises(ShapeError, match=re.escape(str(value)) if isinstance(value, str) else re.escape(repr(value))):
        D.as_dim(value)


@given(exprs, sizes, st.sampled_from(DIM_NAMES))
def test_evaluating_with_a_dim_unbound_names_it(a: DimExpr, bound: dict[str, int], missing: str) -> None:
    x = a.dim()
    assume(missing in D.names(x))
    with pytest.raises(ShapeError, match=f"'{missing}'"):
        D.evaluate(x, {n: v for n, v in bound.items() if n != missing})


def test_division_by_zero_is_a_shape_error() -> None:
    with pytest.raises(ShapeError, match="division by zero"):
        D.floordiv(M, 0)
