"""νGraph benchmark: build, saturate and extract every suite program at its H200 sizes.

    python benchmarks/egraph_bench.py [--rules discovered|identities] [--seconds 2] [--programs a,b]

Prints one row per program: e-nodes, e-classes, iterations, stop reason, build / saturation /
extraction (k = 1 and k = 32) seconds. Rules: the discovered rule set when it exists, else the
identities stated in benchmarks/identities.py. Targets on the 2-core machine: saturation <= 2 s and
top-32 extraction <= 1 s per program.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from axon_eg.egraph.nugraph import Limits, NuGraph  # noqa: E402
from benchmarks.suite import SUITE  # noqa: E402


def load_rules(which: str) -> tuple[str, list]:
    if which in ("discovered", "auto"):
        try:
            from axon_eg.rules_discovered.store import load_rules as load_discovered
        except ImportError:
            if which == "discovered":
                raise SystemExit("no discovered rule set yet (axon_eg.rules_discovered)") from None
        else:
            return "discovered", list(load_discovered())
    from benchmarks.identities import IDENTITIES

    return "identities", list(IDENTITIES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", default="auto", choices=["auto", "discovered", "identities"])
    parser.add_argument("--seconds", type=float, default=2.0, help="saturation time limit per program")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--programs", help="comma-separated suite names (default: all)")
    args = parser.parse_args(argv)
    source, rules = load_rules(args.rules)
    chosen = set(args.programs.split(",")) if args.programs else None
    print(f"rules: {source} ({len(rules)}); limits: {args.iterations} iterations, {args.seconds} s")
    header = (f"| {'program':18s} | e-nodes | e-classes | iters | {'stop':15s} | build s | saturate s "
              f"| extract k=1 s | extract k=32 s | variants |")
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    worst_sat = worst_ext = 0.0
    for entry in SUITE:
        if chosen and entry.name not in chosen:
            continue
        program = entry.bound(small=False)
        t0 = time.perf_counter()
        graph = NuGraph(program, rules)
        build = time.perf_counter() - t0
        report = graph.saturate(Limits(iterations=args.iterations, seconds=args.seconds))
        t0 = time.perf_counter()
        graph.extract(1)
        k1 = time.perf_counter() - t0
        t0 = time.perf_counter()
        variants = graph.extract(32)
        k32 = time.perf_counter() - t0
        worst_sat, worst_ext = max(worst_sat, report.seconds), max(worst_ext, k32)
        print(f"| {entry.name:18s} | {report.enodes:7d} | {report.eclasses:9d} | {report.iterations:5d} | "
              f"{report.stop_reason:15s} | {build:7.2f} | {report.seconds:10.2f} | {k1:13.3f} | {k32:14.3f} | "
              f"{len(variants):8d} |")
    print(f"worst saturation {worst_sat:.2f} s (target <= 2), worst top-32 extraction {worst_ext:.3f} s (target <= 1)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
