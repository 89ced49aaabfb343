"""Re-prove every stored rule from its text (what `axon-eg rules verify` and CI run).

For each entry: the proof record and digest are checked, the proof obligation is rebuilt from the
rule's pattern and conditions alone (``instantiate``: every variable universally quantified under
the conditions), proved again, and its float-safety verdict is recomputed and compared with the
stored one. The stored instance is never trusted: what is re-proved is what the νGraph applies.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .driver import prove_all
from .enumerate import RuleCandidate
from .float_safety import recheck
from .store import RuleStoreError, check_entry, load_entries, obligation_of, remember


@dataclass(frozen=True)
class VerifyReport:
    failures: list[tuple[str, str]]  # (rule, reason)
    total: int
    seconds: float
    proof_seconds: float
    safety_seconds: float


def verify(jobs: int = 2, timeout_ms: int = 4000, *, float_safety: bool = True) -> VerifyReport:
    """Every stored rule re-proved from its text, and (``float_safety``) its verdicts re-run."""
    start = time.perf_counter()
    failures: list[tuple[str, str]] = []
    entries = load_entries()
    obligations = []
    for entry, where in entries:
        try:
            check_entry(entry, where)
            ob = obligation_of(entry, where)
        except RuleStoreError as e:
            failures.append((entry.get("name", "?"), str(e)))
            continue
        obligations.append((entry, ob))
    candidates = [RuleCandidate(e["name"], e["family"], ob.lhs, ob.rhs, ob.symbols) for e, ob in obligations]
    t0 = time.perf_counter()
    for c, r in zip(candidates, prove_all(candidates, timeout_ms, jobs)):
        if not r.proven:
            detail = str(r.counterexample) if r.counterexample else r.detail
            failures.append((c.name, f"re-proof of the rule as stated gave {r.status} ({r.method}: {detail})"))
    t1 = time.perf_counter()
    if float_safety:
        for entry, ob in obligations:
            why = recheck(ob.lhs, ob.rhs, ob.symbols, entry["float_safe"])
            if why:
                failures.append((entry["name"], f"float-safety verdict changed: {why}"))
    t2 = time.perf_counter()
    failed = {name for name, _ in failures}
    remember([e for e, _ in obligations if e["name"] not in failed])  # re-proved here: loading them needs no re-proof
    return VerifyReport(failures, len(entries), t2 - start, t1 - t0, t2 - t1)
