"""Re-prove every stored rule from its programs (what `axon-eg rules verify` and CI run)."""

from __future__ import annotations

import time

from .driver import prove_all
from .store import RuleStoreError, candidate_of, check_entry, load_entries


def verify(jobs: int = 2, timeout_ms: int = 4000) -> tuple[list[tuple[str, str]], int, float]:
    """(failures as (rule, reason), number of entries, seconds)."""
    start = time.perf_counter()
    failures: list[tuple[str, str]] = []
    entries = load_entries()
    candidates = []
    for entry, where in entries:
        try:
            check_entry(entry, where)
        except RuleStoreError as e:
            failures.append((entry.get("name", "?"), str(e)))
            continue
        candidates.append(candidate_of(entry))
    for c, r in zip(candidates, prove_all(candidates, timeout_ms, jobs)):
        if not r.proven:
            failures.append((c.name, f"re-proof gave {r.status} ({r.method}: {r.detail})"))
    return failures, len(entries), time.perf_counter() - start
