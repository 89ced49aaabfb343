"""The NumPy-like front end traces what NumPy would compute, and its errors name the culprit."""

from __future__ import annotations

import json
import re
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import axon_eg as ax
from axon_eg.errors import InvalidAttribute, ProgramError, ShapeError
from axon_eg.ir.inputs import random_inputs

sizes = st.integers(1, 6)


@given(m=st.integers(2, 6), n=sizes, k=sizes, seed=st.integers(0, 2**16))
def test_numpy_like_program_matches_numpy(m: int, n: int, k: int, seed: int) -> None:
    @ax.program(M=m, N=n, K=k)
    def f(x: ax.Tensor["M", "K"], w: ax.Tensor["K", "N"], b: ax.Tensor["N"]):
        h = ax.exp(x @ w * 0.5) + b
        s = h.sum(axis=-1, keepdims=True)
        return ax.softmax(h / s, axis=0).T, (2.0 - h)[1:, ::2].max(axis=0), x.reshape(-1)

    inputs = random_inputs(f, seed)
    x, w, b = inputs["x"], inputs["w"], inputs["b"]
    h = np.exp(x @ w * 0.5) + b
    s = h.sum(axis=-1, keepdims=True)
    z = h / s
    e = np.exp(z - z.max(axis=0, keepdims=True))
    want = ((e / e.sum(axis=0, keepdims=True)).T, None, x.reshape(-1))
    got = ax.interpret(f, inputs)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_array_equal(got[2], want[2])
    np.testing.assert_allclose(got[1], (2.0 - h)[1:, ::2].max(axis=0), rtol=1e-12)


@given(shape=st.lists(sizes, min_size=1, max_size=4), data=st.data())
def test_broadcasting_and_indexing_match_numpy(shape: list[int], data: st.DataObject) -> None:
    other = [d if data.draw(st.booleans()) else 1 for d in shape][data.draw(st.integers(0, len(shape))):]
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    stop = data.draw(st.integers(1, shape[axis]))

    @ax.program
    def f(x: ax.Tensor[tuple(shape)], y: ax.Tensor[tuple(other) or ()]):
        index = [slice(None)] * len(shape)
        index[axis] = slice(0, stop)
        return (ax.maximum(x, y) * ax.sigmoid(y))[tuple(index)], x[..., None].mean(axis=axis)

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(shape), rng.standard_normal(other)
    index = [slice(None)] * len(shape)
    index[axis] = slice(0, stop)
    got = ax.interpret(f, [x, y])
    np.testing.assert_allclose(got[0], (np.maximum(x, y) * (1 / (1 + np.exp(-y))))[tuple(index)], rtol=1e-12)
    np.testing.assert_allclose(got[1], x[..., None].mean(axis=axis), rtol=1e-12)


def test_symbolic_dims_are_kept_and_bound_later() -> None:
    @ax.program
    def f(x: ax.Tensor["B", "H*D", ax.bf16]):
        return x.reshape("B", "H", -1).sum(axis=1)

    assert f.free_dims == {"B", "H", "D"} and not f.bindings
    assert str(f.nodes[f.outputs[0]].shape[-1]) == "D"
    g = f.bind(B=2, H=3, D=4)
    assert g.output_shapes() == [(2, 4)] and g.hash != f.hash
    assert ax.interpret(g, [np.ones((2, 12))]).tolist() == [[3.0] * 4] * 2


def test_shape_mismatch_names_op_shapes_and_line() -> None:
    with pytest.raises(ShapeError) as e:
        @ax.program
        def f(x: ax.Tensor["M", "K"], w: ax.Tensor["N", "K"]):
            return x @ w
    message = str(e.value)
    assert "matmul([M, K], [N, K])" in message and "contraction dims differ" in message
    path, line = re.search(r"at (\S+test_frontend\.py):(\d+)", message).groups()
    assert "return x @ w" in open(path).read().splitlines()[int(line) - 1]


def test_bad_axis_names_op_and_shape() -> None:
    with pytest.raises(ShapeError, match=r"sum\(\[M, K\]\).*axis 2 is out of range for rank 2"):
        @ax.program
        def f(x: ax.Tensor["M", "K"]):
            return x.sum(axis=2)


def test_bad_broadcast_names_both_shapes() -> None:
    with pytest.raises(ShapeError, match=r"add\(\[M, K\], \[M\]\).*cannot broadcast \[M, K\] and \[M\]"):
        @ax.program
        def f(x: ax.Tensor["M", "K"], y: ax.Tensor["M"]):
            return x + y


@pytest.mark.parametrize("call, message", [
    (lambda x: ax.leaky_relu(x, slope="steep"), "leaky_relu.*'slope' must be float"),
    (lambda x: ax.gelu(x, approximate="fast"), r"gelu.*'approximate' must be str in \('none', 'tanh'\)"),
    (lambda x: ax.softmax(x, dim=0), "softmax.*unknown attribute 'dim'"),
    (lambda x: ax.cumsum(x), "cumsum.*missing required attribute 'axis'"),
    (lambda x: ax.transpose(x, (0, 0)), r"transpose.*not a permutation"),
    (lambda x: x.reshape(5, -1), r"reshape.*cannot reshape \[4, 6\]"),
    (lambda x: ax.squeeze(x, 0), "squeeze.*size is 4, not 1"),
    (lambda x: x[7:], "slice.*empty slice"),
    (lambda x: ax.groupnorm(x[None], groups=5), "groupnorm.*do not split into 5 groups"),
    (lambda x: ax.sdpa(x, x[:, :5], x), r"sdpa\(\[4, 6\], \[4, 5\], \[4, 6\]\).*contraction dims differ"),
])
def test_invalid_use_raises_naming_the_op(call, message) -> None:
    with pytest.raises((ShapeError, InvalidAttribute), match=message):
        @ax.program
        def f(x: ax.Tensor[4, 6]):
            return call(x)


def test_missing_annotation_names_parameter() -> None:
    with pytest.raises(ProgramError, match="parameter 'w' needs an annotation"):
        @ax.program
        def f(x: ax.Tensor["M"], w):
            return x


def test_bind_errors_name_the_dim_and_op() -> None:
    @ax.program
    def f(x: ax.Tensor["N"]):
        return x[3:]

    with pytest.raises(ProgramError, match="no dim named 'Q'"):
        f.bind(Q=3)
    with pytest.raises(ProgramError, match="dim N must be bound to an int >= 1"):
        f.bind(N=0)
    with pytest.raises(ShapeError, match=r"slice\(\[2\]\) with N=2"):
        f.bind(N=2)
    with pytest.raises(ProgramError, match=r"dims \['N'\] are not bound"):
        ax.interpret(f, [np.ones(4)])


def test_interpret_checks_input_shapes_by_name() -> None:
    @ax.program(N=3)
    def g(x: ax.Tensor["N"]):
        return -x

    with pytest.raises(ProgramError, match=r"input 'x' has shape \[4\], expected \[3\]"):
        ax.interpret(g, {"x": np.ones(4)})
    with pytest.raises(ProgramError, match=r"missing inputs \['x'\]"):
        ax.interpret(g, {"y": np.ones(3)})


@given(st.sampled_from(['{"version": 1}', "not json", '{"version": 1, "nodes": [{"op": "warp"}], "outputs": []}',
                        '{"version": 1, "nodes": [{"op": "exp", "inputs": [0], "attrs": {}, "shape": [],'
                        ' "dtype": "fp32"}], "outputs": [0]}']))
def test_bad_json_is_a_clear_program_error(text: str) -> None:
    with pytest.raises((ProgramError, ax.errors.UnknownOperation)) as e:
        ax.Program.from_json(text)
    assert str(e.value)


def test_json_with_wrong_stored_shape_is_refused() -> None:
    @ax.program(N=3)
    def g(x: ax.Tensor["N"]):
        return ax.exp(x)

    body = json.loads(g.to_json())
    body["nodes"][1]["shape"] = ["N + 1"]
    with pytest.raises(ProgramError, match=r"node 1 \(exp\): stored shape/dtype"):
        ax.Program.from_json(json.dumps(body))


# ------------------------------------------------------------------------------------------------
# Annotations: dtypes written as strings, torch or NumPy dtypes; misplaced or unsupported ones
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype, want", [
    ("bf16", ax.bf16), ("fp16", ax.fp16), ("fp64", ax.fp64), ("bfloat16", ax.bf16), ("float32", ax.fp32),
    ("double", ax.fp64), (ax.bf16, ax.bf16), (np.float16, ax.fp16), (np.dtype("float64"), ax.fp64),
])
def test_dtype_names_as_strings_and_library_dtypes_are_the_dtype(dtype, want) -> None:
    spec = ax.Tensor["M", "N", dtype]
    assert spec.dtype == want and [str(d) for d in spec.shape] == ["M", "N"]

    @ax.program(M=2, N=3)
    def f(x: ax.Tensor["M", "N", dtype]):
        return ax.exp(x)

    assert f.inputs[0].dtype == want and f.concrete_shape(f.input_ids[0]) == (2, 3)


def test_torch_dtypes_in_annotations() -> None:
    torch = pytest.importorskip("torch")
    assert ax.Tensor[4, torch.bfloat16].dtype == ax.bf16
    assert ax.Tensor[4, torch.int64].dtype == ax.int64 and ax.Tensor[4, torch.bool].dtype == ax.bool_
    with pytest.raises(ax.errors.DtypeError, match=r"torch\.uint8 is not a dtype axon_eg handles"):
        ax.Tensor[4, torch.uint8]


@pytest.mark.parametrize("items, error, message", [
    (("M", "N", "int8"), "DtypeError", r"ax\.Tensor\['M', 'N', 'int8'\]: 'int8' is not a dtype axon_eg handles; "
                                       r"the dtypes are ax\.bf16, ax\.fp16, ax\.fp32, ax\.fp64, ax\.int32, "
                                       r"ax\.int64, ax\.bool_"),
    (("M", "complex64"), "DtypeError", r"'complex64' is not a dtype axon_eg handles"),
    (("bf16", "N"), "ProgramError", r"ax\.Tensor\['bf16', 'N'\]: the dtype 'bf16' must come last"),
    (("M", ax.fp16, "N"), "ProgramError", r"the dtype ax\.fp16 must come last"),
    (("M", "fp16", ax.bf16), "ProgramError", r"two dtypes \('fp16' and ax\.bf16\)"),
    (("M", 2.5), "ShapeError", r"ax\.Tensor\['M', 2\.5\]: not a dimension: 2\.5"),
])
def test_bad_annotations_name_the_item_and_the_line(items, error, message) -> None:
    line = sys._getframe().f_lineno + 2
    with pytest.raises(getattr(ax.errors, error), match=message) as info:
        ax.Tensor[items]
    assert str(info.value).startswith(f"{__file__}:{line}: ax.Tensor[") and "\n" not in str(info.value)


def test_bad_annotation_in_a_program_is_not_wrapped() -> None:
    with pytest.raises(ax.errors.DtypeError, match=r"'uint8' is not a dtype"):
        @ax.program
        def f(x: ax.Tensor["M", "uint8"]):
            return x


# ------------------------------------------------------------------------------------------------
# ax.NAME that does not exist: an AxonError that is also an AttributeError, with what was meant
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, hint", [
    ("softmaxx", r"did you mean ax\.softmax\b"),
    ("Exp", r"did you mean ax\.exp\?"),
    ("float32", r"did you mean ax\.fp32\?"),
    ("int8", r"axon_eg has no int8 dtype; the dtypes are ax\.bf16, ax\.fp16, ax\.fp32, ax\.fp64, ax\.int32, "
             r"ax\.int64, ax\.bool_"),
    ("no_such_thing_at_all", r"`axon-eg ops` lists the ops"),
])
def test_unknown_names_are_axon_errors_with_a_hint(name, hint) -> None:
    with pytest.raises(ax.errors.UnknownName, match=rf"test_frontend\.py:\d+: ax\.{name} does not exist[;:] .*{hint}") as e:
        getattr(ax, name)
    assert isinstance(e.value, AttributeError) and isinstance(e.value, ax.errors.AxonError)
    assert not hasattr(ax, name) and getattr(ax, name, 7) == 7


def test_unknown_name_inside_a_program_names_its_line() -> None:
    line = test_unknown_name_inside_a_program_names_its_line.__code__.co_firstlineno + 5
    with pytest.raises(AttributeError, match=rf"test_frontend\.py:{line}: ax\.rsqrtt does not exist; did you mean ax\.rsqrt"):
        @ax.program(N=3)
        def f(x: ax.Tensor["N"]):
            return ax.rsqrtt(x)


def test_known_names_and_submodules_still_resolve() -> None:
    from axon_eg.ir import frontend

    assert ax.softmax is frontend.softmax and ax.fp64 is ax.ir.dtypes.fp64
    assert ax.validate.positive_int(3, "k") == 3
    with pytest.raises(AttributeError):  # protocol probes keep the plain error
        ax.__wrapped__  # noqa: B018
