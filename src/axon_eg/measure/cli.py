"""``python -m axon_eg.measure``: the phase-2 worker's command line (:mod:`.worker` runs each bundle's
candidates in child processes; ``--ray`` hands them to :mod:`.ray_runner` instead).

Usage: ``python -m axon_eg.measure BUNDLE --out FILE``, or ``python -m axon_eg.measure BUNDLE...`` (each
bundle's rows into ``BUNDLE/rows.jsonl``); ``--warm N`` first compiles every candidate not measured yet, N at
once, untimed. Standard library only here, like the worker.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from axon_eg.measure import ray_runner, worker
from axon_eg.measure.interrupts import Interrupted


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m axon_eg.measure", description=worker.__doc__.splitlines()[0])
    ap.add_argument("bundle", nargs="+", help="bundle directory with manifest.json and sources (several: each "
                    "into its own rows file)")
    ap.add_argument("--out", help=f"JSON-lines file of result rows (appended; resumable); default "
                    f"BUNDLE/{worker.ROWS_NAME}, where the remote flows read them; one bundle only")
    ap.add_argument("--cpu", action="store_true", help="ignore GPUs, run sequentially on the CPU")
    ap.add_argument("--warm", type=int, default=0, metavar="N", help="first compile every candidate not measured yet, "
                    "N children at once, untimed (Triton's and Inductor's caches on disk), then time them one at a "
                    "time as always; GPUs only (default 0: off)")
    ap.add_argument("--ray", metavar="ADDRESS", help="run candidates as Ray tasks on the cluster at ADDRESS "
                    "(\"local\": start a local one; \"auto\": the running one)")
    args = ap.parse_args(argv)
    if args.out and len(args.bundle) > 1:
        print(f"python -m axon_eg.measure: --out names one file, for one bundle; {len(args.bundle)} were given "
              f"(without --out each bundle's rows go to BUNDLE/{worker.ROWS_NAME})", file=sys.stderr)
        return 2
    for bundle in args.bundle:
        if not (Path(bundle) / "manifest.json").is_file():
            print(f"python -m axon_eg.measure: {bundle}: not a bundle (no manifest.json)", file=sys.stderr)
            return 2
    if args.warm and not args.cpu and not args.ray and not args.out:
        try:
            warmed = worker.warm(args.bundle, args.warm)
        except Interrupted as exc:
            print(exc, file=sys.stderr)
            return exc.exit_code
        if warmed:
            print(json.dumps({"warmed": warmed, "parallel": args.warm}), flush=True)
    for bundle in args.bundle:
        out = args.out or str(Path(bundle) / worker.ROWS_NAME)
        if args.ray:
            rows = ray_runner.run_bundle_ray(bundle, out, args.ray)
        else:
            try:
                rows = worker.run_bundle(bundle, out, gpus=[] if args.cpu else None)
            except Interrupted as exc:
                print(exc, file=sys.stderr)
                return exc.exit_code
        counts: dict[str, int] = {}
        for r in rows:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        print(json.dumps({"bundle": str(bundle), "out": out, "new_rows": len(rows), "statuses": counts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
