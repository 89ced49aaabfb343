"""How the dynamo backend cuts a captured graph into regions (:func:`partition`, :func:`cut_region`), and the
FLOPs and bytes of a graph op by op (:func:`graph_work`): the graph-only half of :mod:`axon_eg.dynamo`, which
compiles the regions this returns."""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Collection, Mapping
from functools import cache

import torch

from axon_eg.ir.aten_table import VIEW_LIKE, aten_name, contracts, handler_for


@cache
def moves_no_arithmetic() -> frozenset[str]:
    """Ops that move no arithmetic (the importer's view-like ops and ``clone``; not its casts, which convert
    every element): a region of these alone is left to torch (a kernel would only copy), and they do not
    count toward a region's size."""
    return (VIEW_LIKE | {"aten.clone.default"}) - {"aten.to.dtype", "aten.type_as.default"}


def partition(module: torch.fx.GraphModule, max_ops: int = 24, max_contractions: int = 3) -> torch.fx.GraphModule:
    """``module`` with each maximal convex region of importable ``call_function`` nodes fused into
    submodules (``fused_0``, ``fused_1``, ...), a region of more than ``max_ops`` operations that compute
    (views aside) or ``max_contractions`` contractions (matmul, attention, convolution:
    ``aten_table.contracts``) cut into runs of its topological order within both where the fewest bytes
    cross (:func:`cut_region`): the enumerator's plans and tilings grow fast with a program's size, above all
    with its contractions (a whole decoder block, 67 ops, did not finish in 10 minutes; three linears sharing
    an input gave 16,632 candidates)."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner, Partition
    from torch.fx.passes.operator_support import OperatorSupportBase

    class Supported(OperatorSupportBase):
        def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: torch.fx.Node) -> bool:
            if node.op != "call_function":
                return False
            if node.target is operator.getitem:
                return isinstance(node.args[0], torch.fx.Node) and handler_for(node.args[0].target) is not None
            return handler_for(node.target) is not None and isinstance(node.meta.get("val"), (torch.Tensor, tuple, list))

    partitioner = CapabilityBasedPartitioner(module, Supported(), allows_single_node_partition=True)
    order = {n: i for i, n in enumerate(module.graph.nodes)}
    pieces: list[Partition] = []
    for part in partitioner.propose_partitions():
        runs = _pieces_out(_views_to_readers(cut_region(sorted(part.nodes, key=order.__getitem__), max_ops,
                                                        max_contractions)), part.nodes)
        for chunk in runs:
            pieces.append(Partition(len(pieces), chunk))
    return partitioner.fuse_partitions(pieces)


def _views_to_readers(runs: list[list[torch.fx.Node]]) -> list[list[torch.fx.Node]]:
    """Each view (an op that moves no arithmetic) that only a later run reads, moved into that run: the run
    that computes its input then writes that value as computed (a GEMM's output as the library writes it)
    and the reader folds the view into its loads, where a view left as a region output would be a layout
    copy (``linear(h).view(b, s, heads, d).transpose(1, 2)`` feeding RoPE in the next region). Runs stay
    convex: the view's inputs are all in its own (earlier) run or outside the region."""
    runs = [list(r) for r in runs]
    order = {n: i for i, n in enumerate(n for r in runs for n in r)}
    owner = {n: k for k, r in enumerate(runs) for n in r}
    moved = True
    while moved:
        moved = False
        for k, run in enumerate(runs):
            for n in reversed(run):
                readers = {owner.get(u) for u in n.users}
                if target(n) not in moves_no_arithmetic() or len(readers) != 1:
                    continue
                later = next(iter(readers))
                if later is None or later <= k or any(owner.get(a, k) != k for a in n.all_input_nodes):
                    continue
                run.remove(n)
                runs[later] = sorted([*runs[later], n], key=order.__getitem__)
                owner[n] = later
                moved = True
    return [r for r in runs if r]


_PIECES = (torch.ops.aten.select.int, torch.ops.aten.slice.Tensor, torch.ops.aten.narrow.default)
"""Views that take a piece of a tensor at constant offsets (``x[t]``, ``x[:, a:b]``)."""


def _pieces_out(runs: list[list[torch.fx.Node]], region: Collection[torch.fx.Node]) -> list[list[torch.fx.Node]]:
    """Each run without the contiguous pieces (``_PIECES``) it takes of a value from outside the region that is
    not module state: the piece, a view the region's kernel reads without a copy, is made around the region,
    so the steps of an unrolled loop over ``x[t]`` are one region (one bundle: phase 1 and the measurement
    once, not once per ``t``). A piece that is not contiguous stays in (its kernel folds the offset into its
    loads; out, it would be a copy). Runs stay convex: the piece's inputs are outside the region."""
    def out(node: torch.fx.Node) -> bool:
        val = node.meta.get("val")
        return (node.target in _PIECES and isinstance(val, torch.Tensor) and val.is_contiguous()
                and all(a not in region and not _state(a) for a in node.all_input_nodes))

    runs = [[n for n in run if not out(n)] for run in runs]
    return [r for r in runs if r]


def _state(node: torch.fx.Node) -> bool:
    """A parameter or buffer: read with ``get_attr`` (an exported module), or a placeholder dynamo names for it."""
    return node.op == "get_attr" or node.op == "placeholder" and ("_parameters_" in node.name
                                                                   or "_buffers_" in node.name)


_SIBLING_GEMMS = (torch.ops.aten.linear.default, torch.ops.aten.matmul.default, torch.ops.aten.mm.default)
"""The contractions whose siblings (the same first operand) count once toward a run's ``max_contractions``."""
_ATTENTION = (torch.ops.aten.scaled_dot_product_attention.default,)
_STATISTICS = (torch.ops.aten.mean.dim, torch.ops.aten.var.correction, torch.ops.aten.var_mean.correction)


def cut_region(nodes: list[torch.fx.Node], max_ops: int, max_contractions: int = 3) -> list[list[torch.fx.Node]]:
    """``nodes`` (a region in topological order) cut into runs of that order (each convex) of at most
    ``max_ops`` computing ops and ``max_contractions`` contractions (GEMMs that read the same activation
    counted once: they merge into one), moving the fewest bytes between runs: a
    run reads each value an earlier run made once, and writes each value a later run reads, unless the graph
    needs it anyway (it is read outside the region, or only attention reads it: q, k and v are in memory
    either way, so a cut before attention moves nothing more). So a cut falls between a
    residual add and the norm that reads it (one tensor moves), not inside the norm (its float32
    intermediates would), nor between a row statistic and the pass that applies it. Never between a multi-output
    op and its ``getitem``. Ties go to fewer cuts, then to cuts that leave no contraction apart from its first
    reader (its epilogue) and fall right before a contraction; a run
    that cannot be cut is over the limit. Exact over all cut sets (dynamic programming over run ends)."""
    n = len(nodes)
    pos = {node: i for i, node in enumerate(nodes)}
    size = [_bytes(node) for node in nodes]
    uses = [sorted(pos[u] for u in node.users if u in pos) for node in nodes]
    exported = [any(u not in pos for u in node.users) for node in nodes]
    reads = [sorted({pos[a] for a in node.all_input_nodes if a in pos}) for node in nodes]
    # a value only attention reads is in memory whatever the cut (the library's or our flash kernel's operand)
    exported = [exported[k] or bool(uses[k]) and all(u.target in _ATTENTION for u in node.users if u in pos)
                for k, node in enumerate(nodes)]
    ops = [0]
    for node in nodes:
        ops.append(ops[-1] + _computes(node))
    # contractions, siblings counted once: GEMMs reading the same activation (q, k and v; gate and up) merge
    # into one GEMM over stacked weights (the ``merge_matmul`` rules), so a cut between them costs a launch
    heavy = [(node.args[0] if node.target in _SIBLING_GEMMS and node.args else node, contracts(target(node)))
             if node.target is not operator.getitem and contracts(target(node)) else None for node in nodes]

    # a row statistic (a norm's mean of squares) is read by the pass that applies it in the same run: a cut
    # between them leaves a kernel of its own for a few bytes and reads the rows twice
    statistic_until = [max(uses[k]) if nodes[k].target in _STATISTICS and uses[k] else -1 for k in range(n)]

    reach = [-1] * (n + 1)  # reach[j]: the last use of a statistic made before position j
    for k in range(n):
        reach[k + 1] = max(reach[k], statistic_until[k])
    cuttable = [j == 0 or (nodes[j].target is not operator.getitem and reach[j] < j and  # a cut before position j
                           not any(u.target is operator.getitem for u in nodes[j - 1].users)) for j in range(n)]

    # ties on bytes go to cuts that keep each contraction with its first reader (a conv's or a GEMM's output
    # cut away from its batch norm / bias / activation leaves the epilogue a kernel of its own, and a library
    # conv on channels-last operands a transpose back, for no byte saved), then to cuts right before a
    # contraction (after the previous one's whole epilogue: a ReLU, not only the norm before it)
    misplaced = [0 if heavy[j] is not None else 1 for j in range(n)] + [0]  # misplaced[j]: a cut before j
    for k in range(n):
        if heavy[k] is not None and uses[k]:
            for j in range(k + 1, uses[k][0] + 1):
                misplaced[j] += 2  # a contraction before position j whose readers all come at j or later

    over = 1 + 2 * sum(size) * max(1, n)  # any cut is better than a run over the limit
    best: list[tuple[int, int, int, int]] = [(0, 0, 0, 0)] * (n + 1)  # (cost, cuts, misplaced cuts, start)
    for i in range(1, n + 1):
        options = []
        # the run nodes[j:i], grown as j walks down: its contractions (an LSTM step's cell as its two GEMMs,
        # siblings under one key once), and the bytes it moves: what it reads from earlier runs (each value
        # once) and writes for later ones
        seen: dict[object, int] = {}
        heavy_count = 0
        read: set[int] = set()
        read_bytes = written_bytes = 0
        for j in range(i - 1, -1, -1):
            if heavy[j] is not None and heavy[j][0] not in seen:
                seen[heavy[j][0]] = heavy[j][1]
                heavy_count += heavy[j][1]
            if j in read:  # now made inside the run
                read_bytes -= size[j]
            for v in reads[j]:  # every v < j (topological order)
                if v not in read:
                    read.add(v)
                    read_bytes += size[v]
            if not exported[j] and uses[j] and uses[j][-1] >= i:
                written_bytes += size[j]
            if not cuttable[j]:
                continue
            excess = max(0, ops[i] - ops[j] - max_ops) + max(0, heavy_count - max_contractions)
            options.append((best[j][0] + read_bytes + written_bytes + over * excess, best[j][1] + (1 if j else 0),
                            best[j][2] + misplaced[j], j))
        best[i] = min(options)
    runs: list[list[torch.fx.Node]] = []
    i = n
    while i > 0:
        j = best[i][3]
        runs.append(nodes[j:i])
        i = j
    return runs[::-1]


def graph_work(graph: torch.fx.Graph) -> tuple[int, int]:
    """(FLOPs, bytes) of ``graph``'s ops, op by op, from the shapes export recorded (nothing runs on data):
    FLOPs as ``torch.utils.flop_counter`` counts them (contractions: matmul, convolution, attention), bytes
    each op's tensor inputs and outputs, before any fusion (views and ``getitem`` move none). The measure of
    a model's work that the share in axon_eg's kernels is taken over."""
    from torch._guards import detect_fake_mode
    from torch.utils._pytree import tree_leaves
    from torch.utils.flop_counter import FlopCounterMode

    flops = moved = 0
    for node in graph.nodes:
        if node.op != "call_function" or not _computes(node):
            continue
        moved += _bytes(node) + sum(_bytes(a) for a in node.all_input_nodes)
        if not isinstance(node.target, torch._ops.OpOverload):
            continue
        args, kwargs = torch.fx.node.map_aggregate(
            (node.args, node.kwargs), lambda v: v.meta.get("val") if isinstance(v, torch.fx.Node) else v)
        tensors = [v for v in tree_leaves((args, kwargs)) if isinstance(v, torch.Tensor)]
        try:
            with FlopCounterMode(display=False) as counter, (detect_fake_mode(tensors) or contextlib.nullcontext()):
                node.target(*args, **kwargs)
            flops += counter.get_total_flops()
        except Exception:  # noqa: BLE001, S112 - an op that cannot run on its recorded shapes counts no FLOPs
            continue
    return flops, moved


def _bytes(node: torch.fx.Node) -> int:
    val = node.meta.get("val")
    vals = val if isinstance(val, (tuple, list)) else [val]
    return sum(v.numel() * v.element_size() for v in vals if isinstance(v, torch.Tensor))


def _computes(node: torch.fx.Node) -> bool:
    return node.target is not operator.getitem and target(node) not in moves_no_arithmetic()


def target(node: torch.fx.Node) -> str:
    if node.target is operator.getitem:
        return "getitem"
    return aten_name(node.target)
