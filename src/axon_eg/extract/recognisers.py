"""What the lowerings recognise inside a fusion group, written once, as patterns of the rule language
(``egraph/patterns.py``: ``(op :attr ?a ?x ...)``), and matched by its one matcher over a program's nodes
(``patterns.match_node``: every op of a pattern a node of the group, a variable used twice the same node).
What a pattern cannot say (an axis is the last one, an operand is a buffer outside the group) the caller
checks on the bindings.

- ``SOFTMAX_PV`` / ``SOFTMAX_EXP``: attention's core, ``softmax(s) @ v`` as the ``sdpa`` expansion writes it,
  ``div(exp(s - max(s)), sum(exp(s - max(s)))) @ v``, or unshifted (``softmax_drop_max_shift``)
  (``backends/triton/attention_match.py``);
- ``WELFORD_SQUARE`` / ``WELFORD_DEVIATION`` / ``WELFORD_MEAN``: a variance beside its mean,
  ``mean|sum(square(x - m))`` with ``m = mean(x)`` over the same axes, computed in one pass with Welford's
  update (``extract/fusion.FusionPlan.welford_pairs``);
- ``ONLINE_EXP_SUM``: a softmax's denominator, ``sum(exp(x - max(x)))`` over the max's axes, computed with its
  max in one pass with the online rescale (rule ``exp_online_rescale``: ``extract/fusion.FusionPlan.online_pairs``);
- ``GEMV_OF_SUM``: ``x @ sum(W, -1)`` (or ``mean``), the split-K GEMV (``backends/triton/gemv_splitk.py``).
"""

from __future__ import annotations

from axon_eg.egraph.patterns import NodeMatch, Pattern, match_first, parse_pattern


def _patterns(*texts: str) -> tuple[Pattern, ...]:
    return tuple(parse_pattern(t, rule="recogniser") for t in texts)


SOFTMAX_PV = _patterns("(matmul (div ?e (sum ?e :axes ?sum_axes :keepdims true)) ?v)")
"""``softmax(s) @ v``: the normalization and ``p @ v``; ``?e`` is the softmax's ``exp`` (``SOFTMAX_EXP``)."""
SOFTMAX_EXP = _patterns("(exp (sub ?s (max ?s :axes ?max_axes :keepdims true)))", "(exp ?s)")
"""The softmax's numerator: shifted by its row max, or not (equal by ``softmax_drop_max_shift``)."""

WELFORD_SQUARE = _patterns("(mean (square ?d) :axes ?axes)", "(sum (square ?d) :axes ?axes)",
                           "(mean (mul ?d ?d) :axes ?axes)", "(sum (mul ?d ?d) :axes ?axes)")
"""A reduction of a squared deviation ``?d``."""
WELFORD_DEVIATION = _patterns("(sub ?x ?m)")
WELFORD_MEAN = _patterns("(mean ?x :axes ?axes :keepdims true)", "(mean ?x :axes ?axes :keepdims false)")
"""The deviation's mean: of the same ``?x``, over the same ``?axes`` (without its kept axes only where a view puts
them back: ``fusion._kept_mean`` checks)."""

ONLINE_EXP_SUM = _patterns("(sum (exp (sub ?x (max ?x :axes ?axes :keepdims true))) :axes ?axes)")
"""``sum(exp(x - max(x)))`` over the same axes (softmax's and log-softmax's denominator): ``?x`` and the max's node
are what the one online pass reads and produces."""

GEMV_OF_SUM = _patterns("(matmul ?x (sum ?w :axes ?axes :keepdims true))",
                        "(matmul ?x (mean ?w :axes ?axes :keepdims true))")
"""A matmul whose right operand is a row reduction of a weight: ``x @ sum(W, -1)``."""

RECOGNISERS = {"softmax_pv": SOFTMAX_PV, "softmax_exp": SOFTMAX_EXP, "welford_square": WELFORD_SQUARE,
               "welford_deviation": WELFORD_DEVIATION, "welford_mean": WELFORD_MEAN, "online_exp_sum": ONLINE_EXP_SUM,
               "gemv_of_sum": GEMV_OF_SUM}
"""Every recogniser by name (the tests parse and exercise each)."""


def recognise(name: str, program: object, node: int, *, inside: set[int] | frozenset[int] | None = None,
              given: NodeMatch | None = None) -> NodeMatch:
    """Recogniser ``name`` matched at ``node`` (its first pattern that matches), with ``given``'s bindings."""
    return match_first(RECOGNISERS[name], program, node, inside=inside, given=given)


__all__ = ["GEMV_OF_SUM", "ONLINE_EXP_SUM", "RECOGNISERS", "SOFTMAX_EXP", "SOFTMAX_PV", "WELFORD_DEVIATION", "WELFORD_MEAN",
           "WELFORD_SQUARE", "recognise"]
