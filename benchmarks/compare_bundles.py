"""Compare the candidates of two suite bundle directories (``run_suite.py bundle``): same candidates
(plan, tilings, ISA, lowering) and byte-identical kernel files per program, or what differs.

    python benchmarks/compare_bundles.py OLD_DIR NEW_DIR [--bodies]

``--bodies`` compares only the ``@triton.jit`` kernels and helpers, not the launcher (e.g. when the
launcher's guard changed on purpose). A refactoring that must not change generated code passes with
every program "identical".
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _load(d: Path, bodies: bool) -> dict[str, tuple[list, list[str]]]:
    idx = json.loads((d / "index.json").read_text())
    out = {}
    for name, info in idx.items():
        b = d / info["bundle"]
        rows = json.loads((b / "candidates.json").read_text())
        cands = [(r.get("plan"), r.get("tilings"), r.get("isa"), r.get("lowering")) for r in rows if r["kind"] == "candidate"]
        srcs = []
        for r in rows:
            if r["kind"] == "candidate" and r.get("source"):
                s = (b / Path(r["source"]).name).read_text()
                if bodies:
                    i = s.find("@triton.jit")
                    s = s[i:] if i >= 0 else ""
                    j = s.find("\ndef kernel(")
                    s = s[:j] if j >= 0 else s
                srcs.append(s)
        out[name] = (cands, srcs)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--bodies", action="store_true", help="compare kernel bodies only, not the launchers")
    args = ap.parse_args()
    old, new = _load(args.old, args.bodies), _load(args.new, args.bodies)
    changed = 0
    for name in sorted(set(old) | set(new)):
        if name not in old or name not in new:
            print(f"{name:18s} only in {'new' if name in new else 'old'}")
            changed += 1
            continue
        (oc, os_), (nc, ns) = old[name], new[name]
        if oc == nc and os_ == ns:
            print(f"{name:18s} identical")
            continue
        changed += 1
        what = []
        if oc != nc:
            what.append("candidates differ")
        diff = [i for i, (a, b) in enumerate(zip(os_, ns)) if a != b]
        diff += list(range(min(len(os_), len(ns)), max(len(os_), len(ns))))
        if diff:
            what.append(f"kernel files differ at ranks {diff}")
        print(f"{name:18s} " + "; ".join(what))
    print(f"{changed} of {len(set(old) | set(new))} programs changed")
    return 1 if changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
