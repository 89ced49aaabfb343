"""The aten ops of the model corpus that the PyTorch importer has no handler for (issue 49's worklist).

    python benchmarks/importer_gaps.py [--config small] [--raw] [MODEL ...]

Each model of ``benchmarks.models.MODELS`` (all of them, or those named) is built in the config, exported
with ``torch.export`` and functionalized as ``axon_eg.dynamo.functional`` does (``run_decompositions({})``;
``--raw`` skips that step and reads the training IR as exported). Every ``call_function`` target that
``axon_eg.ir.aten_table.handler_for`` does not know is listed with the models it occurs in, most models
first: those are the ops that cut a ``torch.compile(backend="axon_eg")`` region or stay torch code. Export's
metadata assertions (``aten._assert_tensor_metadata``, which the dynamo backend drops) are left out. A model
that fails to build or export is named with its error. Exits 1 when an op is unhandled.
"""

from __future__ import annotations

import argparse
import collections
import operator
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from axon_eg.ir.aten_table import aten_name, handler_for  # noqa: E402
from benchmarks.models import MODELS  # noqa: E402

IGNORED = {"aten._assert_tensor_metadata.default"}


def unhandled(name: str, config: str = "small", raw: bool = False) -> set[str]:
    """The aten ops of model ``name`` without an importer handler."""
    spec = MODELS[name]
    model, args = spec.build(config), spec.inputs(config, seed=0)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exported = torch.export.export(model, tuple(args))
        if not raw:
            exported = exported.run_decompositions({})
    graph = exported.module().graph
    return {aten_name(n.target) for n in graph.nodes
            if n.op == "call_function" and n.target is not operator.getitem and handler_for(n.target) is None
            and aten_name(n.target) not in IGNORED}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="corpus model names (default: all)")
    parser.add_argument("--config", default="small")
    parser.add_argument("--raw", action="store_true", help="the training IR as exported, not functionalized")
    args = parser.parse_args(argv)
    hits: dict[str, set[str]] = collections.defaultdict(set)
    failed: dict[str, str] = {}
    names = args.models or sorted(MODELS)
    for name in names:
        try:
            ops = unhandled(name, args.config, args.raw)
        except Exception as e:  # noqa: BLE001 - a model that does not export is reported, not fatal
            failed[name] = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}"
            continue
        for op in ops:
            hits[op].add(name)
    print(f"{len(names)} models ({args.config}{', raw' if args.raw else ''}): "
          f"{len(hits)} unhandled aten ops")
    for op, models in sorted(hits.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f"  {op} ({len(models)}): {', '.join(sorted(models))}")
    for name, why in sorted(failed.items()):
        print(f"  {name}: did not export: {why}")
    return 1 if hits or failed else 0


if __name__ == "__main__":
    sys.exit(main())
