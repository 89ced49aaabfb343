"""Discovery: enumerate candidates, prove or refute each, test float safety, write the store.

Each candidate is first stated as a rule (``to_rule``); what is proved is the rule's obligation
rebuilt from the rule text (``instantiate``), never the candidate's own programs, so the admitted
rule holds everywhere the νGraph can apply it. A candidate the pattern language cannot state is
proved as written only to report it (refuted, unknown, or "unexpressible" when true).

Phase one proves the candidates that need no facts; phase two builds candidates from what phase
one proved (rescaling for every proven exp-like homomorphism; composites folded into a matmul or a
convolution by the νGraph using the phase-one rules) and proves them the same way. Unknown is never
admitted.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from axon_eg.errors import AxonError
from axon_eg.semantics.prover import ProofResult, prove_equal

from . import enumerate as E
from .float_safety import check_float_safety
from .instantiate import InstantiationError, instantiate
from .store import make_entry, remember, write
from .to_rule import Unexpressible, reverse, to_rule

_CANDIDATES: list[E.RuleCandidate] = []


@dataclass
class Summary:
    candidates: int = 0
    proven: int = 0
    refuted: int = 0
    unknown: int = 0
    unexpressible: int = 0
    seconds: float = 0.0
    proof_seconds: list[float] = field(default_factory=list)
    by_family: dict[str, dict[str, int]] = field(default_factory=dict)


def _prove(i: int, timeout_ms: int) -> tuple[int, ProofResult]:
    c = _CANDIDATES[i]
    try:
        return i, prove_equal(c.lhs, c.rhs, symbols=c.symbols, timeout_ms=timeout_ms)
    except (AxonError, ArithmeticError, ValueError) as e:  # a semantics gap: unknown, never admitted
        return i, ProofResult("unknown", "error", 0.0, f"{type(e).__name__}: {e}")


def prove_all(candidates: Sequence[E.RuleCandidate], timeout_ms: int, jobs: int,
              progress: Callable[[int], None] | None = None) -> list[ProofResult]:
    global _CANDIDATES
    _CANDIDATES = list(candidates)
    results: list[ProofResult | None] = [None] * len(candidates)
    if jobs > 1 and len(candidates) > 50:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(jobs) as pool:
            for i, r in pool.imap_unordered(_prove_star, [(i, timeout_ms) for i in range(len(candidates))], chunksize=8):
                results[i] = r
                if progress:
                    progress(1)
    else:
        for i in range(len(candidates)):
            results[i] = _prove(i, timeout_ms)[1]
            if progress:
                progress(1)
    return [r for r in results if r is not None]


def _prove_star(args: tuple[int, int]) -> tuple[int, ProofResult]:
    return _prove(*args)


def discover(timeout_ms: int = 2000, jobs: int = 2, write_store: bool = True,
             progress: Callable[[str, int, int], Any] | None = None) -> tuple[Summary, list[dict], list[dict]]:
    """Run discovery end to end; returns the summary, admitted entries and rejected entries."""
    start = time.perf_counter()
    summary = Summary()
    admitted: list[dict] = []
    rejected: list[dict] = []
    seen: set[tuple] = set()

    def run_phase(label: str, candidates: list[E.RuleCandidate]) -> list[tuple[E.RuleCandidate, Any]]:
        unique = []
        for c in candidates:
            if c is None:
                continue
            key = (c.family, c.lhs.canonical().hash, c.rhs.canonical().hash, c.symbols)
            if key in seen:
                continue
            seen.add(key)
            unique.append(c)
        done = 0

        def tick(n: int) -> None:
            nonlocal done
            done += n
            if progress:
                progress(label, done, len(unique))

        stated: list[tuple[E.RuleCandidate, Any, str]] = []  # (what is proved, the rule or None, why not stated)
        for c in unique:
            try:
                rule = to_rule(c)
                ob = instantiate(rule)
                stated.append((E.RuleCandidate(c.name, c.family, ob.lhs, ob.rhs, ob.symbols), rule, ""))
            except (Unexpressible, InstantiationError) as e:
                stated.append((c, None, str(e)))
        results = prove_all([s[0] for s in stated], timeout_ms, jobs, tick)
        proven_rules = []
        for (c, rule, why), r in zip(stated, results):
            summary.candidates += 1
            fam = summary.by_family.setdefault(c.family, {"candidates": 0, "proven": 0, "refuted": 0, "unknown": 0})
            fam["candidates"] += 1
            summary.proof_seconds.append(r.seconds)
            if r.status != "proven":
                setattr(summary, r.status, getattr(summary, r.status) + 1)
                fam[r.status] += 1
                rejected.append({"name": c.name, "family": c.family, "status": r.status, "method": r.method,
                                 "detail": str(r.counterexample) if r.counterexample else r.detail})
                continue
            if rule is None:
                summary.unexpressible += 1
                rejected.append({"name": c.name, "family": c.family, "status": "unexpressible", "method": r.method,
                                 "detail": why})
                continue
            summary.proven += 1
            fam["proven"] += 1
            safety = check_float_safety(c.lhs, c.rhs, symbols=c.symbols)
            admitted.append(make_entry(rule, r, safety))
            proven_rules.append((c, rule, safety))
        return proven_rules

    first = run_phase("phase 1", E.phase_one())
    homomorphic = sorted({c.lhs.nodes[-1].op for c, _, _ in first
                          if c.family == "homomorphism" and c.name.endswith("_add_to_mul")})
    rules = []  # the search for folds may use every proven direction: what it proposes is proved on
    for _, rule, _safety in first:  # its own and gets its own float-safety verdict
        rules.append(rule)
        back = reverse(rule)
        if back is not None:
            rules.append(back)
    second = list(E.rescaling(homomorphic)) + list(E.folds(_fold_rules(rules)))
    run_phase("phase 2", second)
    summary.seconds = time.perf_counter() - start
    if write_store:
        write(admitted, rejected)
        remember(admitted)  # proved here: loading them needs no re-proof
    return summary, admitted, rejected


def _fold_rules(rules: list) -> list:
    """Phase-one rules the folding search uses: those that move work into or out of a matmul,
    distribute, or merge scales (a small set keeps the νGraph search fast)."""
    keep = ("scale_matmul", "scale_conv", "binary_binary", "swap", "reduce_matmul")
    return [r for r in rules if r.meta.get("family") in keep]
