"""The rule store: admitted rules as human-readable JSON, one file per family, with proof records.

``data/<family>.json`` holds entries sorted by name; each entry has the rule's text (lhs, rhs,
conditions), its proof record (method, solver and version, seconds, lemmas, the hash of the
semantics it was proved against), its float-safety verdict per direction, and a digest of all of
that. What was proved is the rule text itself: ``instantiate`` rebuilds the proof obligation from
it (``axon-eg rules verify`` re-proves every entry that way). ``data/rejected.json`` lists refuted
candidates with their counterexamples and unknown ones with the reason.

``load_rules()`` refuses, naming the entry, any entry without a proof, proved against other
semantics, whose digest does not match, or whose text does not parse as a rule. Proof records, the
digest and the semantics hash are :mod:`axon_eg.proofs`'s, shared with the NKI store.

The digest only catches careless edits: anyone can recompute it. So the loader admits an entry only as
proved: either its exact text (with its record, verdicts and digest, under the current semantics hash)
is on this machine's record of proved entries (:class:`axon_eg.proofs.ProvedHere`, outside the
repository, written only after a proof here: by discovery, ``rules verify`` or this loader), or the
loader re-proves it now (:func:`attest`): the obligation rebuilt from its text (``instantiate``) must be
proved by ``prove_equal`` and its float-safety verdicts must be the ones a re-check gives. An edited rule
whose digest was recomputed is therefore re-proved on its first load, and refused, in one line naming
the rule and its file, when the proof or the verdicts fail. An untouched store whose keys are on record
loads at the cost of one hash per entry; a fresh machine (or a new semantics hash) re-proves each entry
once.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from axon_eg.egraph.patterns import Rule, format_sexp, parse_rule
from axon_eg.errors import AxonError
from axon_eg.proofs import ProvedHere, check_proof_record, digest, record, semantics_hash  # shared with the NKI store
from axon_eg.semantics.prover import prove_equal

from . import DATA  # the one place it is defined
from .float_safety import recheck
from .instantiate import InstantiationError, instantiate
from .to_rule import reverse


class RuleStoreError(AxonError):
    """A stored rule that cannot be trusted (no proof, stale semantics, edited, malformed)."""


_TEXT_KEYS = ("lhs", "rhs", "conditions", "context")


def rule_text(rule: Rule) -> dict[str, Any]:
    """The rule as stored: its sides, conditions, and its context patterns where it has any."""
    text: dict[str, Any] = {"lhs": str(rule.lhs), "rhs": str(rule.rhs),
                            "conditions": [format_sexp(c) for c in rule.conditions]}
    if rule.context:
        text["context"] = [str(c) for c in rule.context]
    return text


def make_entry(rule: Rule, proof: Any, safety: Any) -> dict[str, Any]:
    entry = {
        "name": rule.name,
        "family": rule.meta["family"],
        **rule_text(rule),
        "proof": record(proof, semantics_hash()),
        "float_safe": {"forward": safety.forward, "backward": safety.backward, "detail": safety.detail},
    }
    entry["digest"] = digest(entry)
    return entry


def write(entries: list[dict[str, Any]], rejected: list[dict[str, Any]], directory: Path = DATA) -> list[Path]:
    """Write one file per family (atomically: temp file, then rename), sorted by name."""
    directory.mkdir(parents=True, exist_ok=True)
    by_family: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        by_family.setdefault(e["family"], []).append(e)
    written = []
    for stale in directory.glob("*.json"):
        if stale.stem not in by_family and stale.stem != "rejected":
            stale.unlink()
    for family, items in sorted(by_family.items()):
        written.append(_atomic_write(directory / f"{family}.json",
                                     {"family": family, "entries": sorted(items, key=lambda e: e["name"])}))
    written.append(_atomic_write(directory / "rejected.json",
                                 {"entries": sorted(rejected, key=lambda e: (e["family"], e["name"]))}))
    return written


def _atomic_write(path: Path, body: Any) -> Path:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


@dataclass(frozen=True)
class StoredRule:
    rule: Rule
    entry: dict[str, Any]

    @property
    def forward_safe(self) -> bool:
        return bool(self.entry["float_safe"]["forward"])

    @property
    def backward_safe(self) -> bool:
        return bool(self.entry["float_safe"]["backward"])


def rule_of(entry: dict[str, Any], where: str = "the store") -> Rule:
    """The entry's rule, parsed from its text; RuleStoreError naming the entry when it does not parse."""
    name = entry.get("name", "?")
    try:
        rule = parse_rule(name, entry["lhs"], entry["rhs"], list(entry["conditions"]), list(entry.get("context", [])),
                          family=entry["family"])
    except (AxonError, KeyError, TypeError, ValueError) as e:
        raise RuleStoreError(f"rule {name} in {where}: malformed ({e})") from None
    if rule_text(rule) != {k: entry[k] for k in _TEXT_KEYS if k in entry}:
        raise RuleStoreError(f"rule {name} in {where}: its text is not in canonical form (edited by hand?)")
    return rule


def obligation_of(entry: dict[str, Any], where: str = "the store") -> Any:
    """The proof obligation of a stored rule, rebuilt from its text (``instantiate``)."""
    try:
        return instantiate(rule_of(entry, where))
    except InstantiationError as e:
        raise RuleStoreError(f"rule {entry.get('name', '?')} in {where}: {e}") from None


def check_entry(entry: dict[str, Any], where: str) -> StoredRule:
    check_proof_record(entry, where, semantics_hash(), RuleStoreError, "`axon-eg rules discover`", "rule ")
    return StoredRule(rule_of(entry, where), entry)


def load_entries(directory: Path = DATA) -> list[tuple[dict[str, Any], str]]:
    out = []
    for path in sorted(directory.glob("*.json")):
        if path.stem == "rejected":
            continue
        try:
            body = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise RuleStoreError(f"{path}: not valid JSON ({e})") from None
        out += [(e, str(path.name)) for e in body.get("entries", [])]
    return out


REPROVE_TIMEOUT_MS = 4000  # as `axon-eg rules verify`


def proved_here() -> ProvedHere:
    """This machine's record of the rule entries it proved, under the current semantics hash."""
    return ProvedHere("rules", semantics_hash())


def remember(entries: list[dict[str, Any]]) -> None:
    """Record ``entries`` as proved here (discovery and ``rules verify`` call it for what they proved)."""
    record_ = proved_here()
    record_.add(record_.key(json.loads(json.dumps(e))) for e in entries)


def reprove(entry: dict[str, Any], where: str = "the store") -> None:
    """Prove the entry's rule again from its text and re-check its float-safety verdicts; RuleStoreError
    naming the rule and ``where`` when either fails."""
    name = entry.get("name", "?")
    ob = obligation_of(entry, where)
    try:
        result = prove_equal(ob.lhs, ob.rhs, symbols=ob.symbols, timeout_ms=REPROVE_TIMEOUT_MS)
        status, detail = result.status, (f"{result.method}: {result.counterexample or result.detail}"
                                         if result.status != "proven" else "")
    except (AxonError, ArithmeticError, ValueError) as e:
        status, detail = "unknown", f"error: {type(e).__name__}: {e}"
    if status != "proven":
        raise RuleStoreError(f"rule {name} in {where}: not the text that was proved (changed since, digest recomputed?): "
                             f"its re-proof gave {status} ({detail}); run `axon-eg rules discover`")
    why = recheck(ob.lhs, ob.rhs, ob.symbols, entry["float_safe"])
    if why:
        raise RuleStoreError(f"rule {name} in {where}: its float-safety verdict is not the one a re-check gives "
                             f"({why}); run `axon-eg rules discover`")


def attest(entries: list[tuple[dict[str, Any], str]]) -> None:
    """Every entry is on this machine's record of proved entries or is re-proved now (:func:`reprove`,
    which refuses it); what is re-proved is recorded."""
    record_ = proved_here()
    known = record_.keys()
    proved = []
    try:
        for entry, where in entries:
            key = record_.key(entry)
            if key not in known:
                reprove(entry, where)
                proved.append(key)
    finally:
        record_.add(proved)


@cache
def _load_cached(directory: str) -> tuple[StoredRule, ...]:
    entries = load_entries(Path(directory))
    stored = tuple(check_entry(e, where) for e, where in entries)
    attest(entries)
    return stored


def load_stored(directory: Path = DATA) -> tuple[StoredRule, ...]:
    return _load_cached(str(directory))


def load_rules(directory: Path = DATA, *, families: set[str] | None = None) -> list[Rule]:
    """The admitted rules as νGraph rules: each float-safe direction (a rule read right to left is
    named ``name~rev``); a direction that hurts in floating point is never returned."""
    out = []
    for stored in load_stored(directory):
        if families is not None and stored.entry["family"] not in families:
            continue
        if stored.forward_safe:
            out.append(stored.rule)
        back = reverse(stored.rule)
        if back is not None and stored.backward_safe:
            out.append(back)
    return out
