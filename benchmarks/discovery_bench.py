"""Rule-discovery benchmark: enumerate, prove and float-check every candidate over the registry.

    python benchmarks/discovery_bench.py [--jobs 2] [--timeout-ms 2000]

Prints candidates, proven, refuted and unknown per family, total seconds (target <= 10 minutes on
the 2-core machine), and the median / p95 / max time per candidate. Does not touch the store.
"""

from __future__ import annotations

import argparse

from rich.console import Console

from axon_eg.cli import _print_summary
from axon_eg.rules_discovered.driver import discover


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout-ms", type=int, default=2000)
    args = parser.parse_args(argv)
    summary, admitted, rejected = discover(timeout_ms=args.timeout_ms, jobs=args.jobs, write_store=False)
    console = Console(highlight=False)
    _print_summary(console, summary)
    unsafe = [e["name"] for e in admitted if not (e["float_safe"]["forward"] and e["float_safe"]["backward"])]
    console.print(f"{len(admitted)} admitted; {len(unsafe)} with a float-unsafe direction: {', '.join(unsafe)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
