"""Proof records, for both stores of proven facts: the rule store (``rules_discovered/data``) and the NKI
store of lowerings and instruction fusions (``backends/nki/data``).

A stored proven entry carries a proof record -- status, method, solver, seconds, lemmas and the hash of
the semantics it was proved against -- and a digest of all its contents. :func:`semantics_hash` is the
hash algebraic rules are proved against (the prover's ``semantics`` package, the registry, the
composites); :func:`isa_semantics_hash` the one NKI lowerings and fusions are (that, plus the instruction
declarations and meanings of ``semantics/isa``). Both hash syntax trees without docstrings, so comments
and formatting do not make proofs stale. :func:`check_proof_record` is what each store's loader runs on
every entry before trusting it.

A record and a digest are no evidence: anyone who edits an entry can recompute its digest (SHA-256 of
public data; a keyed digest would need a secret, which an open repository cannot keep). The evidence is
a proof, so a loader re-proves what it has not seen proved: :class:`ProvedHere` is the local record of
the entries *this machine* proved -- one line per entry, :func:`entry_key` of its whole canonical text
(rule, proof record, verdicts, digest) and the semantics hash -- kept in ``$AXON_EG_PROOF_CACHE``, else
``~/.cache/axon_eg/proved``, outside the repository (and apart from ``$AXON_EG_CACHE``, which runs and
tests point at fresh directories: what this machine proved holds for all of them), written only after a
proof succeeded here (discovery, ``rules verify``, or a loader's re-proof). An edit to a stored entry changes
its key, which no file in the repository can supply: the loader re-proves that entry from its text,
admits it if the proof holds, and refuses it, naming it and its file, if not. An untouched store costs a
hash per entry once the keys are on record; a fresh machine re-proves every entry once.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

from axon_eg.semantics.prover import SOLVER

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


def entry_key(entry: dict[str, Any], semantics: str) -> str:
    """What :class:`ProvedHere` records for a proven entry: SHA-256 over the semantics hash and the entry's
    whole canonical text (an edit to any of it, digest recomputed or not, gives another key)."""
    text = json.dumps(entry, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"axon_eg proved entry v1\0{semantics}\0{text}".encode()).hexdigest()


def proof_cache_dir() -> Path:
    """Where :class:`ProvedHere` keeps its records: ``$AXON_EG_PROOF_CACHE``, else ``~/.cache/axon_eg/proved``."""
    env = os.environ.get("AXON_EG_PROOF_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "axon_eg" / "proved"


class ProvedHere:
    """The keys (:func:`entry_key`) of the entries of store ``store`` proved on this machine against the
    semantics hash ``semantics``: one file of lines, appended to. A cache that cannot be read or written
    holds nothing (every entry is re-proved); a damaged line is a key nobody has (its entry is re-proved)."""

    def __init__(self, store: str, semantics: str):
        self.semantics = semantics
        self.path = proof_cache_dir() / f"{store}-{semantics[:20]}.keys"

    def key(self, entry: dict[str, Any]) -> str:
        return entry_key(entry, self.semantics)

    def keys(self) -> set[str]:
        try:
            return set(self.path.read_text().split())
        except (OSError, UnicodeDecodeError):
            return set()

    def add(self, keys: Iterable[str]) -> None:
        new = "".join(f"{k}\n" for k in sorted(set(keys)))
        if not new:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as f:  # one append: processes loading at once add, never truncate
                f.write(new)
        except OSError:
            pass
