"""Proof records, for both stores of proven facts: the rule store (``rules_discovered/data``) and the NKI
store of lowerings and instruction fusions (``backends/nki/data``).

A stored proven entry carries a proof record -- status, method, solver, seconds, lemmas and the hash of
the semantics it was proved against -- and a digest of all its contents. :func:`semantics_hash` is the
hash algebraic rules are proved against (the prover's ``semantics`` package, the registry, the
composites); :func:`isa_semantics_hash` the one NKI lowerings and fusions are (that, plus the instruction
declarations and meanings of ``semantics/isa``). Both hash syntax trees without docstrings, so comments
and formatting do not make proofs stale. :func:`check_proof_record` is what each store's loader runs on
every entry before trusting it.
"""

from __future__ import annotations

import ast
import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parent
SEMANTICS_DIR = PACKAGE / "semantics"
ISA_SEMANTICS_DIR = SEMANTICS_DIR / "isa"
NOT_SEMANTICS = {"numeric.py"}  # the test oracle that evaluates normal forms; proofs do not use it
IR_DIR = PACKAGE / "ir"
# The registry (element references, shape and dtype rules) and the composites' expansions: what a
# proof obligation is built from and what the numeric search evaluates.
IR_SEMANTICS = ("ops.py", "composites.py")


def semantics_files() -> list[Path]:
    """The modules whose code is the meaning every rule proof was checked against: the prover's
    semantics package, the registry and the composites."""
    own = [p for p in sorted(SEMANTICS_DIR.glob("*.py")) if p.name not in NOT_SEMANTICS]
    return own + [IR_DIR / name for name in IR_SEMANTICS]


def isa_semantics_files() -> list[Path]:
    """The instruction declarations and meanings NKI proofs were checked against (``semantics/isa``)."""
    return sorted(ISA_SEMANTICS_DIR.glob("*.py"))


def ast_text(path: Path) -> str:
    """The module's syntax tree without docstrings: comments and formatting do not invalidate proofs."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, include_attributes=False)


@cache
def semantics_hash() -> str:
    """SHA-256 of ``semantics_files()``: a changed relu reference or softmax expansion makes every
    proof stale (syntax trees without docstrings: comments and formatting do not)."""
    h = hashlib.sha256()
    for path in semantics_files():
        h.update(f"{path.parent.name}/{path.name}".encode())
        h.update(ast_text(path).encode())
    return h.hexdigest()


@cache
def isa_semantics_hash() -> str:
    """SHA-256 of what lowering proofs were checked against: the registry ops' semantics and the
    prover (``semantics_hash``) plus the instruction declarations and semantics (``semantics/isa``)."""
    h = hashlib.sha256(semantics_hash().encode())
    for path in isa_semantics_files():
        h.update(path.name.encode())
        h.update(ast_text(path).encode())
    return h.hexdigest()


def solver() -> str:
    """The solver and version proofs are made with (``z3 4.x``)."""
    from axon_eg.semantics.prover import SOLVER

    return SOLVER


def record(result: Any, semantics: str, **extra: Any) -> dict[str, Any]:
    """The proof record of a proven ``prover.ProofResult`` against the semantics hash ``semantics``."""
    return {"status": result.status, "method": result.method, "solver": solver(), "seconds": round(result.seconds, 4),
            "lemmas": list(result.lemmas), "semantics": semantics, **extra}


def digest(entry: dict[str, Any]) -> str:
    """SHA-256 of an entry's contents (all but its digest), canonical JSON."""
    body = {k: v for k, v in entry.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def check_proof_record(entry: dict[str, Any], where: str, semantics: str, error: type[Exception], rerun: str,
                       what: str = "") -> None:
    """A stored proven entry (a rule, or an NKI lowering or fusion) must carry a proof record against
    ``semantics`` and a digest matching its contents; else ``error`` naming the entry and what to run."""
    name = f"{what}{entry.get('name', '?')}"
    proof = entry.get("proof")
    if not isinstance(proof, dict) or proof.get("status") != "proven":
        raise error(f"{name} in {where}: no proof record; run {rerun}")
    if proof.get("semantics") != semantics:
        raise error(f"{name} in {where}: proved against other semantics (stale hash "
                    f"{str(proof.get('semantics'))[:12]}); run {rerun}")
    if entry.get("digest") != digest(entry):
        raise error(f"{name} in {where}: its digest does not match its contents (edited by hand?)")
