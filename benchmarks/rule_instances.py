"""Instance property at scale: every admitted rule direction on many random concrete matches.

    python benchmarks/rule_instances.py [--per-rule 50] [--seed 0]

Prints, per rule family, how many directions were checked, how many concrete matches were drawn
(``axon_eg.testing.rules.draw_match``: edge sizes, unequal dims, unpinned attributes, signed
constants), how many disagreed with the other side in float64, and the first disagreement.
The CI test (``tests/rules/test_instances.py``) runs the same property with fewer draws.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from rich.console import Console
from rich.table import Table

from axon_eg.rules_discovered.store import load_rules
from axon_eg.testing.rules import NoMatch, compare, draw_match


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-rule", type=int, default=50, help="concrete matches per rule direction")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rows: dict[str, list] = {}
    first: list[str] = []
    start = time.perf_counter()
    for rule in load_rules():
        family = str(rule.meta.get("family"))
        row = rows.setdefault(family, [0, 0, 0, 0])
        row[0] += 1
        rng = np.random.default_rng(args.seed)
        for k in range(args.per_rule):
            try:
                match = draw_match(rule, rng)
            except NoMatch:
                row[3] += 1
                break
            row[1] += 1
            why = compare(match, args.seed + k)
            if why:
                row[2] += 1
                if len(first) < 5:
                    first.append(f"{rule.name}: {why}")
    table = Table(title=f"instance property, {args.per_rule} matches per direction ({time.perf_counter() - start:.1f} s)")
    for col in ("family", "directions", "matches", "failures", "no match"):
        table.add_column(col, justify="left" if col == "family" else "right")
    totals = [0, 0, 0, 0]
    for family, row in sorted(rows.items()):
        table.add_row(family, *map(str, row))
        totals = [a + b for a, b in zip(totals, row)]
    table.add_row("total", *map(str, totals))
    console = Console()
    console.print(table)
    for line in first:
        console.print(line, markup=False)


if __name__ == "__main__":
    main()
