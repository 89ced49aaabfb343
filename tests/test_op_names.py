"""Every string the code compares with an op name is a registered op (issue 50): a typo in ``node.op ==
"sofmax"`` would silently never match. Read from the source with ``ast``: a comparison (``==``, ``!=``,
``in``, ``not in``) whose one side is an op name (``x.op``, ``op``, ``name``, ``op_name``, ``x.op_name``) and
whose other side is a string literal or a tuple / list / set of them."""

from __future__ import annotations

import ast
from pathlib import Path

import axon_eg.ir  # noqa: F401 - registers every op, the library ops too
from axon_eg.ir.ops import REGISTRY

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "axon_eg"
OP_NAMES = ("op", "op_name")
NOT_OPS = {"input", "constant"}
"""Node kinds a program has besides registered ops."""
FX_NODE_KINDS = {"placeholder", "call_function", "call_module", "call_method", "get_attr", "output", "getitem"}
"""``torch.fx.Node.op`` values (and ``operator.getitem``'s name), which the torch importer and dynamo compare."""
TILE_OPS = {"affine", "exp_affine"}
"""The NKI synthesis space's composite tile instructions (``backends/nki/synthesis_space.TileOp``)."""
OTHER_VOCABULARIES = {
    "axon_eg/egraph/convert.py": {"true", "shape", "dtype"},  # egglog term heads
    "axon_eg/rules_discovered/instantiate.py": {"="},  # the relation of a rule's side condition
    "axon_eg/testing/strategies.py": {"name", "int"},  # attribute kinds of a generated op
    "axon_eg/backends/triton/blas.py": {"torch.matmul", "torch.mm"},  # calls in emitted source
    "axon_eg/triton_in/descriptors.py": {"load"},  # Triton language calls in a user's kernel
}
"""Files whose ``op`` names something else; only these strings are allowed there."""


def _is_op(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr in OP_NAMES) or \
        (isinstance(node, ast.Name) and node.id in OP_NAMES)


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def unknown_op_strings(root: Path, known: set[str], others: dict[str, set[str]] | None = None) -> list[str]:
    """``file:line 'name'`` for each string compared with an op name that is not in ``known`` (nor, in a file
    of ``others``, in that file's own vocabulary)."""
    bad = []
    for path in sorted(root.rglob("*.py")):
        where = str(path.relative_to(root.parent))
        allowed = known | (others or {}).get(where, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            for left, op, right in zip(sides, node.ops, sides[1:]):
                if not isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
                    continue
                for a, b in ((left, right), (right, left)):
                    if _is_op(a):
                        bad += [f"{where}:{node.lineno} {s!r}" for s in _strings(b)
                                if s not in allowed and not s.startswith("aten.")]
    return bad


def test_every_op_name_the_code_compares_with_is_registered() -> None:
    from axon_eg.semantics.isa.declarations import DECLARATIONS

    known = set(REGISTRY) | NOT_OPS | FX_NODE_KINDS | set(DECLARATIONS) | TILE_OPS
    assert not unknown_op_strings(PACKAGE, known, OTHER_VOCABULARIES)


def test_the_check_sees_a_misspelt_op(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text('def f(n):\n    return n.op == "sofmax" or n.op in ("exp", "lgo")\n')
    assert unknown_op_strings(pkg, set(REGISTRY)) == ["pkg/a.py:2 'sofmax'", "pkg/a.py:2 'lgo'"]
