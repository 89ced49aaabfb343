"""Identities stated by hand, true over the reals, used as νGraph rule data until rule discovery
(issue 4) lands. They live outside ``src/`` on purpose: the optimizer itself never ships
hand-written rules. Tests, the exploration notebook and the e-graph benchmark use them.
"""

from __future__ import annotations

from axon_eg.egraph.patterns import Rule, parse_rule

_RANK2 = ["(= (rank ?A) 2)", "(= (rank ?B) 2)"]

IDENTITIES: tuple[Rule, ...] = (
    parse_rule("add_comm", "(add ?a ?b)", "(add ?b ?a)"),
    parse_rule("mul_comm", "(mul ?a ?b)", "(mul ?b ?a)"),
    parse_rule("add_assoc", "(add (add ?a ?b) ?c)", "(add ?a (add ?b ?c))"),
    parse_rule("mul_assoc", "(mul (mul ?a ?b) ?c)", "(mul ?a (mul ?b ?c))"),
    parse_rule("mul_distrib", "(mul ?a (add ?b ?c))", "(add (mul ?a ?b) (mul ?a ?c))"),
    parse_rule("exp_mul", "(mul (exp ?a) (exp ?b))", "(exp (add ?a ?b))"),
    parse_rule("exp_add", "(exp (add ?a ?b))", "(mul (exp ?a) (exp ?b))"),
    parse_rule("neg_neg", "(neg (neg ?x))", "?x"),
    parse_rule("sub_neg", "(sub ?a ?b)", "(add ?a (neg ?b))"),
    parse_rule("mul_self", "(mul ?x ?x)", "(square ?x)"),
    parse_rule("div_recip", "(div ?a ?b)", "(mul ?a (reciprocal ?b))"),
    parse_rule("recip_sqrt", "(reciprocal (sqrt ?x))", "(rsqrt ?x)"),
    parse_rule("relu_relu", "(relu (relu ?x))", "(relu ?x)"),
    parse_rule("log_exp", "(log (exp ?x))", "?x"),
    parse_rule("transpose_transpose", "(transpose (transpose ?x :perm [1 0]) :perm [1 0])", "?x"),
    parse_rule("transpose_matmul", "(transpose (matmul ?A ?B) :perm [1 0])",
               "(matmul (transpose ?B :perm [1 0]) (transpose ?A :perm [1 0]))", _RANK2),
    parse_rule("scalar_through_matmul", "(matmul (mul ?A ?s) ?B)", "(mul (matmul ?A ?B) ?s)", ["(= (rank ?s) 0)"]),
    parse_rule("row_scale_through_matmul", "(matmul (mul ?A ?r) ?B)", "(mul (matmul ?A ?B) ?r)",
               [*_RANK2, "(= (rank ?r) 2)", "(= (dim ?r 1) 1)", "(= (dim ?r 0) (dim ?A 0))"]),
    parse_rule("col_scale_into_weight", "(matmul (mul ?A ?g) ?B)",
               "(matmul ?A (mul (expand_dims ?g :axis 1) ?B))", [*_RANK2, "(= (rank ?g) 1)"]),
    parse_rule("sum_into_matmul", "(sum (matmul ?A ?B) :axes [1] :keepdims true)",
               "(matmul ?A (sum ?B :axes [1] :keepdims true))", _RANK2),
    parse_rule("sum_into_matmul_squeezed", "(sum (matmul ?A ?B) :axes [1] :keepdims false)",
               "(squeeze (matmul ?A (sum ?B :axes [1] :keepdims true)) :axes [1])", _RANK2),
    parse_rule("sum_add", "(sum (add ?a ?b) :axes ?ax :keepdims ?k)",
               "(add (sum ?a :axes ?ax :keepdims ?k) (sum ?b :axes ?ax :keepdims ?k))", ["(= (shape ?a) (shape ?b))"]),
    parse_rule("sum_size1", "(sum ?x :axes [1] :keepdims true)", "?x", ["(= (dim ?x 1) 1)"]),
)

# Planted falsehoods for tests: each must be caught by the shape analysis or the numeric check.
UNSOUND: tuple[Rule, ...] = (
    parse_rule("matmul_comm", "(matmul ?A ?B)", "(matmul ?B ?A)"),
    parse_rule("exp_add_wrong", "(exp (add ?a ?b))", "(add (exp ?a) (exp ?b))"),
    parse_rule("sum_drops_axis", "(sum ?x :axes ?ax :keepdims true)", "?x"),
    parse_rule("cast_is_free", "(matmul ?A ?B)", "(cast (matmul ?A ?B) :dtype \"fp16\")"),
)
