"""Candidate enumeration benchmark: variants x fusion plans x tilings per suite program and target.

    python benchmarks/extract_bench.py [--target h200] [--programs a,b] [--k 16]

Prints, per suite program at its H200 sizes: variants, fusion plans, tilings considered / feasible /
kept, candidates built and kept, and seconds (νGraph saturation with the discovered rules excluded;
target <= 5 s per program on the 2-core machine).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from axon_eg.egraph.nugraph import Limits, NuGraph  # noqa: E402
from axon_eg.extract.candidates import enumerate_candidates  # noqa: E402
from axon_eg.hw import load  # noqa: E402
from axon_eg.rules_discovered.store import load_rules  # noqa: E402
from axon_eg.targets import backend_for_hw  # noqa: E402
from benchmarks.suite import SUITE  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="h200")
    parser.add_argument("--programs")
    parser.add_argument("--k", type=int, default=16)
    args = parser.parse_args(argv)
    chosen = set(args.programs.split(",")) if args.programs else None
    rules = load_rules()
    print(f"target {args.target}; k = {args.k}")
    print("| program | variants | plans | tilings considered | feasible | kept | candidates | kept "
          "| best predicted us | seconds |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for entry in SUITE:
        if chosen and entry.name not in chosen:
            continue
        graph = NuGraph(entry.bound(small=False), rules)
        graph.saturate(Limits(iterations=10, seconds=2))
        start = time.perf_counter()
        cands, s = enumerate_candidates(graph, args.target, k=args.k, backend=backend_for_hw(load(args.target)))
        seconds = time.perf_counter() - start
        worst = max(worst, seconds)
        best = cands[0].predicted_seconds * 1e6 if cands else float("nan")
        print(f"| {entry.name} | {s.variants} | {s.plans} | {s.tilings_considered} | {s.tilings_feasible} | "
              f"{s.tilings_kept} | {s.candidates} | {s.kept} | {best:.1f} | {seconds:.2f} |")
    print(f"worst {worst:.2f} s per program (target <= 5 s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
