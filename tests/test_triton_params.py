"""Parameters shared with the reference (issue 52): an input's tensors matched to the reference's by name, then by
shape in order (a 2-D tensor by its transposed shape when nothing else fits); every guess refused naming both sides."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from axon_eg.triton_in.params import share
from axon_eg.triton_in.source import TritonInputError


@st.composite
def renamed(draw):
    """(the reference's state, the input's: the same tensors renamed, some 2-D ones transposed, in another
    order between shapes but the same order within a shape; the pairs expected)."""
    shapes = draw(st.lists(st.lists(st.integers(1, 9), min_size=1, max_size=3).map(tuple), min_size=1, max_size=6,
                           unique=True))
    theirs = [(f"ref.layer{k}.t", s) for k, s in enumerate(shapes)]
    mine, pairs = [], []
    for k, (name, shape) in enumerate(theirs):
        flip = len(shape) == 2 and shape[0] != shape[1] and shape[::-1] not in shapes and draw(st.booleans())
        mine.append((f"mine_{k}", shape[::-1] if flip else shape))
        pairs.append((f"mine_{k}", name, flip))
    order = draw(st.permutations(range(len(mine))))
    return theirs, [mine[i] for i in order], sorted(pairs)


@settings(max_examples=80, deadline=None)
@given(renamed())
def test_renamed_reordered_and_transposed_tensors_find_their_partners(case):
    theirs, mine, pairs = case
    assert sorted(share(mine, theirs)) == pairs


def test_names_first_then_shape_in_order():
    theirs = [("fc1.weight", (8, 4)), ("fc1.bias", (8,)), ("fc2.weight", (8, 8)), ("fc2.bias", (8,))]
    mine = [("fc2.bias", (8,)), ("w1", (4, 8)), ("b1", (8,)), ("w2", (8, 8))]
    assert sorted(share(mine, theirs)) == [("b1", "fc1.bias", False), ("fc2.bias", "fc2.bias", False),
                                           ("w1", "fc1.weight", True), ("w2", "fc2.weight", False)]


@pytest.mark.parametrize("mine, theirs, message", [
    ([("a", (3,)), ("b", (3,))], [("x", (3,)), ("y", (3,)), ("z", (3,))],
     "the input's a, b and the reference's x, y, z share the shape [3] but are not as many on both sides"),
    ([("w", (5, 7))], [("fc.weight", (5, 6))],
     "the input's w (shape [5, 7]) has no tensor of the reference to take its values from (unmatched there: "
     "fc.weight [5, 6])"),
])
def test_a_guess_is_refused_naming_both_sides(mine, theirs, message):
    with pytest.raises(TritonInputError) as err:
        share(mine, theirs)
    assert message in str(err.value), str(err.value)


def test_an_input_without_parameters_shares_nothing():
    assert share([], [("fc.weight", (4, 4))]) == []
