"""``torch.compile(model, backend="axon_eg")`` (``axon_eg.dynamo``) on the CPU under the Triton interpreter:
random programs written as modules, graph breaks, an unsupported op between two regions, two input
shapes, gradients (torch code, said once), options, and a Llama-style decoder block against float64."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import importlib.util  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import warnings  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch import nn  # noqa: E402

import axon_eg as ax  # noqa: E402
from axon_eg import dynamo, partition, regions  # noqa: E402
from axon_eg.backends.torch.lower import emit_module  # noqa: E402
from axon_eg.errors import InvalidArgument  # noqa: E402
from axon_eg.testing.modules import DecoderBlock  # noqa: E402
from axon_eg.testing.strategies import programs  # noqa: E402
from axon_eg.testing.subprocesses import NO_AXON_EG_IMPORT  # noqa: E402

OPTS = {"k": 2, "saturation_s": 0.3}


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def compiled(module, tmp_path, **extra):
    return torch.compile(module, backend="axon_eg", options={**OPTS, "cache_dir": str(tmp_path), **extra})


def eager_and_compiled(module, tmp_path, *inputs):
    """(the module's outputs, the compiled module's), without gradients."""
    with torch.no_grad():
        return module(*inputs), compiled(module, tmp_path)(*inputs)


def test_the_backend_is_registered_by_its_entry_point():
    assert "axon_eg" in torch._dynamo.list_backends(exclude_tags=())


def _as_module(program, tmp_path):
    """The program as ordinary torch code (``emit_module``'s ``reference_torch``) in an ``nn.Module``."""
    path = tmp_path / f"{program.name}_module.py"
    path.write_text(emit_module(program))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)

    class AsModule(torch.nn.Module):
        def forward(self, *xs):
            return mod.reference_torch(*xs)

    return AsModule()


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs(max_nodes=4))
def test_random_programs_as_modules_give_the_eager_result(tmp_path_factory, program):
    from axon_eg.backends.kernel import input_specs
    from axon_eg.measure import harness

    tmp = tmp_path_factory.mktemp("dyn")
    module = _as_module(program, tmp)
    inputs = harness.make_inputs(input_specs(program), 0, "cpu")
    with torch.no_grad():
        want = module(*inputs)
        got = compiled(module, tmp)(*inputs)
    for w, g in zip(want if isinstance(want, (tuple, list)) else [want], got if isinstance(got, (tuple, list)) else [got]):
        torch.testing.assert_close(g.double(), w.double(), rtol=2e-2, atol=2e-2)


class Broken(torch.nn.Module):
    """Two regions of kernels around a graph break."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(24, 16)

    def forward(self, x):
        h = torch.softmax(self.lin(x), dim=-1)
        torch._dynamo.graph_break()
        return torch.nn.functional.silu(h * 3.0 + 1.0)


class Unsupported(torch.nn.Module):
    """An op axon_eg has no equivalent for (``erfinv``) between two regions."""

    def forward(self, x):
        a = torch.tanh(x * 0.5 + 0.1)
        b = torch.erfinv(a * 0.9)
        return torch.softmax(b * 2.0, dim=-1) + x


@pytest.mark.slow
def test_a_graph_break_gives_two_graphs_each_with_its_kernel(tmp_path):
    x = torch.randn(6, 24)
    m = Broken().eval()
    with torch.no_grad():
        want = m(x)
        before = len(dynamo.Compiled.made)
        got = compiled(m, tmp_path)(x)
    made = dynamo.Compiled.made[before:]
    assert len(made) == 2
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert all(any(r.kernel for r in regions) for c in made for regions in c.report.values()), \
        [r.line() for c in made for regions in c.report.values() for r in regions]


@pytest.mark.slow  # Inductor compiles the rest of the graph: 8 s in CI (make test-slow)
def test_an_unsupported_op_stays_torch_between_two_regions(tmp_path):
    x = torch.randn(5, 12)
    want, got = eager_and_compiled(Unsupported().eval(), tmp_path, x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    regions = [r for c in dynamo.Compiled.made[-1:] for rs in c.report.values() for r in rs]
    assert len(regions) == 2 and all(r.kernel for r in regions), [r.line() for r in regions]
    graph = dynamo.Compiled.made[-1].graphs[next(iter(dynamo.Compiled.made[-1].graphs))]
    assert "erfinv" in graph.code  # the op between them is in the parent graph (Inductor compiles it)


@pytest.mark.slow
def test_two_input_shapes_build_two_versions(tmp_path):
    m = Broken().eval()
    c = compiled(m, tmp_path)
    with torch.no_grad():
        for rows in (4, 9, 4):
            x = torch.randn(rows, 24)
            torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-5)
    shapes = {entry[0] for made in dynamo.Compiled.made for key in made.versions for entry in key}
    assert {(4, 24), (9, 24)} <= shapes  # built once each (the third call reuses the first version)


def test_with_gradients_it_runs_torch_code_and_says_so_once(tmp_path):
    m = Broken()
    x = torch.randn(3, 24, requires_grad=True)
    c = compiled(m, tmp_path)
    before = len(dynamo.Compiled.made)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = c(x)
        y.sum().backward()
        c(x)
    said = [w for w in caught if "axon_eg compiles inference only" in str(w.message)]
    assert 1 <= len(said) <= 2 and x.grad is not None  # one per captured graph, the backward is torch's
    assert not any(made.versions for made in dynamo.Compiled.made[before:])  # nothing was built


def test_an_unknown_option_is_named():
    with pytest.raises(InvalidArgument, match="unknown option 'kk'"):
        dynamo.options({"kk": 3})
    assert dynamo.options({"k": 3})["k"] == 3
    with pytest.raises(InvalidArgument, match="target 'nki': the backend runs Triton kernels"):
        dynamo.options({"target": "nki"})


@pytest.mark.slow
def test_a_llama_style_decoder_block_matches_float64(tmp_path):
    torch.manual_seed(0)
    block = DecoderBlock(hidden=32, heads=4, kv_heads=2, intermediate=64, max_seq=16).eval()
    x = torch.randn(1, 8, 32)
    with torch.no_grad():
        want = block.double()(x.double())
        block.float()
        got = compiled(block, tmp_path)(x)
    err = ((got.double() - want).norm() / want.norm()).item()
    assert err < 1e-5, err
    regions = [r for c in dynamo.Compiled.made for rs in c.report.values() for r in rs]
    assert any(r.kernel for r in regions), [r.line() for r in regions]


@pytest.mark.slow
def test_optimize_gives_a_drop_in_module(tmp_path):
    import axon_eg as ax

    m = Broken().eval()
    x = torch.randn(5, 24)
    fast = ax.optimize(m, (x,), cache_dir=str(tmp_path), **OPTS)
    assert isinstance(fast, torch.nn.Module) and fast.original is m
    assert fast.report and all(r.kernel for r in fast.report), [r.line() for r in fast.report]
    with torch.no_grad():
        torch.testing.assert_close(fast(x), m(x), rtol=1e-4, atol=1e-5)
        y = torch.randn(3, 24)  # another signature: built at its first call
        torch.testing.assert_close(fast(y), m(y), rtol=1e-4, atol=1e-5)
    with pytest.raises(InvalidArgument, match="takes an nn.Module"):
        ax.optimize(lambda t: t, (x,))


SAVED_CHECK = NO_AXON_EG_IMPORT + """
import importlib.util, json, sys, torch
spec = importlib.util.spec_from_file_location("model_new", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
sizes = json.loads(sys.argv[2])
for k, v in sizes.items():
    setattr(mod, k, v)
torch.manual_seed(0)
ref = mod.Model(*mod.get_init_inputs()).eval()
torch.manual_seed(0)
new = mod.ModelNew(*mod.get_init_inputs()).eval()
torch.manual_seed(1)
xs = mod.get_inputs()
with torch.no_grad():
    want, got = ref(*xs), new(*xs)
print("AXON_SAVED", float((got - want).abs().max()), [m for m in sys.modules if m.split(".")[0] == "axon_eg"])
"""


@pytest.mark.slow  # several seconds of subprocesses or the interpreter: make test-slow (CI) runs it
def test_a_saved_model_new_runs_with_only_torch_and_triton_and_matches_model(tmp_path):
    import json
    import subprocess

    import axon_eg as ax

    problem = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "problems", "03_Gemm_GELU_Softmax.py")
    spec = importlib.util.spec_from_file_location("kb03", problem)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    for k, v in mod.SMALL_SIZES.items():
        setattr(mod, k, v)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs()).eval()
    fast = ax.optimize(model, tuple(mod.get_inputs()), cache_dir=str(tmp_path / "cache"), **OPTS)
    assert any(r.kernel for r in fast.report), [r.line() for r in fast.report]
    saved = fast.save(tmp_path / "model_new.py")
    text = saved.read_text()
    assert "class ModelNew(Model)" in text and "import axon_eg" not in text and "from axon_eg" not in text
    proc = subprocess.run([sys.executable, "-c", SAVED_CHECK, str(saved), json.dumps(mod.SMALL_SIZES)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "TRITON_INTERPRET": "1"})
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("AXON_SAVED")), None)
    assert line is not None, proc.stderr[-3000:]
    err, loaded = line.split(" ", 2)[1:]
    assert float(err) < 1e-5 and loaded == "[]"


class PassThrough(torch.nn.Module):
    """A region whose outputs include its input (``.float()`` of a float tensor) and a value twice."""

    def forward(self, x):
        y = x.float()
        s = torch.softmax(y * 2.0, dim=-1)
        z = torch.erfinv(torch.tanh(y) * 0.9)
        return s + z, s * 3.0, y


@pytest.mark.slow  # seconds of interpreted kernels or compiles: make test-slow (CI) runs it
def test_a_region_output_that_is_an_input_is_passed_through_not_copied(tmp_path):
    x = torch.randn(4, 10)
    want, got = eager_and_compiled(PassThrough().eval(), tmp_path, x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    assert got[2] is x or got[2].data_ptr() == x.data_ptr()  # the input itself, as torch gives it
    kernels = [k for c in dynamo.Compiled.made[-1:] for v in c.graphs.values() for _, k in v.named_children()
               if isinstance(k, regions.RegionKernel)]
    assert kernels and all(len(k.best.program.outputs) == len({*k.best.program.outputs} - {*k.best.program.input_ids})
                           for k in kernels)  # each kernel writes each distinct computed value once
    assert any(k.where and ("in", 0) in k.where for k in kernels)  # y = x.float() is x, handed back


SAVED_BLOCK = """
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("model_new", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
sizes = (32, 4, 2, 64, 16)
torch.manual_seed(0)
ref = mod.DecoderBlock(*sizes).eval()
torch.manual_seed(0)
new = mod.ModelNew(*sizes).eval()
x = torch.randn(1, 8, 32)
with torch.no_grad():
    want, got = ref.double()(x.double()), new(x)
print("AXON_SAVED", float(((got.double() - want).norm() / want.norm())))
"""


@pytest.mark.slow
def test_remote_phase_two_bundles_then_rows_then_a_saved_model_new(tmp_path):
    """The flow for a GPU box without egglog: phase 1 on the meta device (no weights) writes a bundle per
    region, the worker measures them elsewhere (here: the CPU), the next build selects from the rows, and
    the saved ModelNew (exported on meta, so free of that device) runs on real tensors."""
    import json
    import subprocess

    import axon_eg as ax
    from axon_eg.measure.cli import main as worker

    with torch.device("meta"):
        block = DecoderBlock(hidden=32, heads=4, kv_heads=2, intermediate=64, max_seq=16).eval()
        x = torch.empty(1, 8, 32)
    remote = tmp_path / "remote"
    first = ax.optimize(block, (x,), remote=str(remote), **OPTS)
    waiting = [r for r in first.report if r.bundle]
    assert waiting and all(r.why_torch.startswith("not measured yet") and r.kernel is None for r in waiting)
    bundles = sorted(str(p) for p in (remote / "bundles").iterdir())
    assert sorted(r.bundle for r in waiting) == bundles
    assert worker([*bundles, "--cpu"]) == 0
    assert all((remote / "bundles" / b / "rows.jsonl").is_file() for b in os.listdir(remote / "bundles"))
    for b in bundles:  # a region is measured against what runs when no kernel wins: eager and Inductor's code
        ids = {json.loads(line)["id"] for line in open(os.path.join(b, "rows.jsonl"))}
        assert {"torch_eager", "torch_compile_default"} <= ids and "torch_compile" not in ids
    second = ax.optimize(block, (x,), remote=str(remote), **OPTS)
    assert any(r.kernel for r in second.report), [r.line() for r in second.report]
    saved = second.save(tmp_path / "model_new.py")
    assert "device(type='meta')" not in saved.read_text() and "_assert_tensor_metadata" not in saved.read_text()
    proc = subprocess.run([sys.executable, "-c", SAVED_BLOCK, str(saved)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TRITON_INTERPRET": "1"})
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("AXON_SAVED")), None)
    assert line is not None, proc.stderr[-3000:]
    assert float(line.split()[1]) < 1e-5


def test_remote_and_another_cache_dir_are_refused(tmp_path):
    with pytest.raises(InvalidArgument, match="remote"):
        dynamo.options({"remote": str(tmp_path / "a"), "cache_dir": str(tmp_path / "b")})


def _chain(kinds: list[tuple[str, int]]) -> list[torch.fx.Node]:
    """An fx graph of a chain with skips: each node adds (``add``) or multiplies (``mm``) the previous value
    and, every third node, the value three back; ``size`` sets its square shape (meta tensors)."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(4, 4, device="meta")
    nodes: list[torch.fx.Node] = []
    for i, (kind, size) in enumerate(kinds):
        prev = nodes[-1] if nodes else x
        other = nodes[i - 3] if i >= 3 and i % 3 == 0 else prev
        target = torch.ops.aten.mm.default if kind == "mm" else torch.ops.aten.add.Tensor
        node = graph.call_function(target, (prev, other))
        node.meta["val"] = torch.empty(size, size, device="meta")
        nodes.append(node)
    graph.output(nodes[-1])
    return nodes


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "mm"]), st.integers(1, 64)), min_size=1, max_size=9),
       st.integers(1, 4), st.integers(1, 2))
def test_cut_region_is_the_cheapest_cut_within_the_limits(kinds, max_ops, max_mm):
    """Against every set of cuts: the runs keep the order, stay within both limits, and no other cut set
    within them moves fewer bytes (ties: fewer cuts)."""
    import itertools

    nodes = _chain(kinds)
    runs = partition.cut_region(nodes, max_ops, max_mm)
    assert [n for run in runs for n in run] == nodes

    def fits(run):
        return sum(1 for n in run) <= max_ops and sum(n.target is torch.ops.aten.mm.default for n in run) <= max_mm

    def cost(starts):  # each value another run reads: written once (unless the output needs it), read once per run
        pos = {n: i for i, n in enumerate(nodes)}
        run_of = {n: sum(1 for s in starts if s <= i) for i, n in enumerate(nodes)}
        moved = 0
        for n in nodes:
            readers = {run_of[u] for u in n.users if u in pos} - {run_of[n]}
            if readers:
                moved += partition._bytes(n) * (len(readers) + all(u in pos for u in n.users))
        return moved, len(starts)

    assert all(fits(run) for run in runs)
    mine = cost([nodes.index(run[0]) for run in runs[1:]])
    for r in range(len(nodes)):
        for starts in itertools.combinations(range(1, len(nodes)), r):
            bounds = [0, *starts, len(nodes)]
            if all(fits(nodes[a:b]) for a, b in zip(bounds, bounds[1:])):
                assert mine <= cost(list(starts)), (starts, mine, cost(list(starts)))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=2, max_size=6), st.integers(1, 3), st.integers(1, 64))
def test_cuts_keep_each_contraction_with_its_epilogue(epilogues, max_mm, size):
    """A chain of contractions, each followed by its element-wise epilogue (conv, batch norm, ReLU), all values
    of one size, so every cut moves the same bytes: each cut falls right before a contraction, never between
    one and its epilogue (which would leave the epilogue a kernel of its own)."""
    graph = torch.fx.Graph()
    prev = graph.placeholder("x")
    prev.meta["val"] = torch.empty(size, size, device="meta")
    nodes: list[torch.fx.Node] = []
    for tail in epilogues:
        for target in [torch.ops.aten.mm.default] + [torch.ops.aten.relu.default] * tail:
            prev = graph.call_function(target, (prev, prev) if target is torch.ops.aten.mm.default else (prev,))
            prev.meta["val"] = torch.empty(size, size, device="meta")
            nodes.append(prev)
    graph.output(prev)
    runs = partition.cut_region(nodes, 64, max_mm)
    assert len(runs) == -(-len(epilogues) // max_mm)
    assert all(run[0].target is torch.ops.aten.mm.default for run in runs)


def test_the_block_is_cut_where_only_bf16_values_cross():
    """The Llama block's regions: at most 3 contractions each (linears reading one activation, which merge into
    one GEMM, counted once), and no float32 value of the norms (their upcast and normalized rows) is written
    between two regions."""
    torch.manual_seed(0)
    block = DecoderBlock(hidden=64, heads=4, kv_heads=2, intermediate=128, max_seq=16).to(torch.bfloat16).eval()
    with torch.no_grad():
        module = torch.export.export(block, (torch.randn(1, 8, 64, dtype=torch.bfloat16),)).module()
    regions.drop_asserts(module.graph)
    module.recompile()
    fused = partition.partition(module)
    calls = dynamo._region_calls(fused)
    assert len(calls) >= 2
    for name, node in calls:
        sub = getattr(fused, name)
        assert len({n.args[0] for n in sub.graph.nodes if n.op == "call_function" and "linear" in str(n.target)}) <= 3
        for arg in node.args:
            val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
            if isinstance(val, torch.Tensor) and arg.op != "placeholder" and arg.op != "get_attr":
                assert val.dtype == torch.bfloat16, (name, arg.name, val.dtype)


class Unrolled(nn.Module):
    """A cell over the steps of ``x`` (``x[t]`` seq-first, ``x[:, t]`` batch-first), its state carried."""

    def __init__(self, batch_first: bool) -> None:
        super().__init__()
        self.batch_first = batch_first
        self.cell = nn.Linear(12, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.zeros(x.shape[0 if self.batch_first else 1], 6)
        for t in range(x.shape[1 if self.batch_first else 0]):
            step = x[:, t] if self.batch_first else x[t]
            h = torch.tanh(self.cell(torch.cat([step, h], dim=-1))) * 0.5 + h
        return h


@pytest.mark.parametrize("batch_first", [False, True])
def test_the_steps_of_an_unrolled_loop_over_contiguous_pieces_are_one_region(batch_first):
    """``x[t]`` of a seq-first input is contiguous: it is taken around the regions, which are then the same
    graph each step (one bundle, phase 1 once); ``x[:, t]`` of a batch-first one is not (a copy, out of the
    region): each region reads ``x`` whole and folds its step's offset into its loads."""
    x = torch.randn(4, 5, 6) if batch_first else torch.randn(5, 4, 6)
    with torch.no_grad():
        module = torch.export.export(Unrolled(batch_first).eval(), (x,)).module()
    regions.drop_asserts(module.graph)
    module.recompile()
    fused = partition.partition(module, max_contractions=1)
    calls = dynamo._region_calls(fused)
    assert len(calls) == 5
    inner = [sum(n.op == "call_function" and n.target is torch.ops.aten.select.int for n in getattr(fused, name).graph.nodes)
             for name, _ in calls]
    steps = {dynamo.by_position(dynamo.region_program(getattr(fused, name), node, "step")[0]).hash
             for name, node in calls[1:]}
    if batch_first:
        assert inner == [1] * 5 and len(steps) == 4
    else:
        assert inner == [0] * 5 and len(steps) == 1
        outside = [n for n in fused.graph.nodes if n.op == "call_function" and n.target is torch.ops.aten.select.int]
        assert len(outside) == 5


@pytest.mark.parametrize("given, message", [({"region_ops": 0}, "region_ops must be an integer >= 1"),
                                            ({"region_contractions": 1.5}, "region_contractions must be"),
                                            ({"remote": 3}, "remote must be a directory path")])
def test_bad_option_values_are_named(given, message):
    with pytest.raises(InvalidArgument, match=message):
        dynamo.options(given)


def test_a_region_runs_the_fastest_candidate_faster_than_eager_when_a_compile_baseline_was_selected(tmp_path):
    """A cached run of the same program may hold a torch.compile row that won the selection; a region cannot
    run it, so it runs the fastest correct candidate faster than eager, or its eager code."""
    from types import SimpleNamespace

    import polars as pl

    (tmp_path / "manifest.json").write_text('{"candidates": [{"id": "c01", "entry": "kernel", "mode": "dps"}]}')
    rows = [("torch_compile", "baseline", "ok", 5.0), ("torch_eager", "baseline", "ok", 20.0),
            ("c00", "candidate", "ok", 25.0), ("c01", "candidate", "ok", 12.0), ("c02", "candidate", "wrong_result", 1.0)]
    table = pl.DataFrame({"id": [r[0] for r in rows], "kind": [r[1] for r in rows], "status": [r[2] for r in rows],
                          "median_us": [r[3] for r in rows], "source": [str(tmp_path / f"{r[0]}.py") for r in rows],
                          "hw": ["h200"] * len(rows)})
    result = SimpleNamespace(best=SimpleNamespace(kind="baseline", id="torch_compile", program=None), table=table,
                             bundle=tmp_path)
    chosen = dynamo.region_kernel(result)
    assert chosen.id == "c01" and chosen.kind == "candidate" and chosen.mode == "dps"
    slow = table.with_columns(pl.when(pl.col("id") == "c01").then(30.0).otherwise(pl.col("median_us")).alias("median_us"))
    assert dynamo.region_kernel(SimpleNamespace(best=result.best, table=slow, bundle=tmp_path)) is None


# ------------------------------------------------------------------------------------------------
# The hybrid (issue 49): the graph around axon_eg's regions is Inductor's, the kept regions spliced in as
# opaque custom ops, and a region is kept only where it beats what Inductor makes of it.
# ------------------------------------------------------------------------------------------------
class AroundAnUnimportedOp(nn.Module):
    """Two importable runs around ``logcumsumexp`` (no importer handler): the middle is not axon_eg's."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(12, 20)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.gelu(self.proj(x))
        s = torch.logcumsumexp(h, dim=-1)
        return torch.sigmoid(s) * h + 0.5


def _inductor_sources() -> list[str]:
    from torch._inductor.codecache import PyCodeCache

    mods = PyCodeCache.modules.values() if isinstance(PyCodeCache.modules, dict) else PyCodeCache.modules
    return [open(m.__file__).read() for m in mods if getattr(m, "__file__", None)]


def test_an_op_axon_eg_does_not_import_runs_in_inductors_code_with_the_regions_spliced_in(tmp_path):
    torch.manual_seed(0)
    model = AroundAnUnimportedOp().eval()
    x = torch.randn(3, 5, 12)
    before = len(_inductor_sources())
    compiled = torch.compile(model, backend="axon_eg", options={**OPTS, "cache_dir": str(tmp_path)})
    with torch.no_grad():
        got = compiled(x)
        want = model.double()(x.double())
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)
    made = dynamo.Compiled.made[-1]
    key = next(iter(made.versions))
    assert made.rest[key] == "inductor"
    kept = [r for r in made.report[key] if r.kernel]
    assert kept, [r.line() for r in made.report[key]]
    new = _inductor_sources()[before:]
    assert any("logcumsumexp" in src for src in new), "Inductor made no code for the op axon_eg does not import"
    assert any("torch.ops.axon_eg." in src for src in new), "the kept regions are not called from Inductor's code"


def test_rest_eager_runs_the_graph_as_torch_code_and_a_bad_rest_is_refused(tmp_path):
    torch.manual_seed(1)
    model = AroundAnUnimportedOp().eval()
    x = torch.randn(2, 12)
    opt = ax.optimize(model, (x,), rest="eager", cache_dir=str(tmp_path), **OPTS)
    key = next(iter(opt.compiled.versions))
    assert opt.compiled.rest[key].startswith("eager") and opt.compiled.versions[key] is opt.compiled.graphs[key]
    with torch.no_grad():
        torch.testing.assert_close(opt(x).double(), model.double()(x.double()), rtol=1e-4, atol=1e-5)
    with pytest.raises(InvalidArgument, match="rest"):
        ax.optimize(model, (x,), rest="aot")


class NothingToKeep(nn.Module):
    """A transpose (a region of views only: no kernel) before an op axon_eg does not import."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.logcumsumexp(x.transpose(0, 1), dim=0)


def test_with_no_region_kept_the_model_runs_torch_compiles_own_code(tmp_path):
    """No region kept: the backend hands Inductor the graph dynamo captured, ``ax.optimize`` is
    ``torch.compile`` of the module, and the saved ``ModelNew`` compiles its class's own ``forward``: what
    ``torch.compile`` makes of the model, not Inductor's code for the exported, partitioned graph."""
    x = torch.randn(6, 5) * 3
    want = NothingToKeep()(x.double())
    made = compiled(NothingToKeep(), tmp_path)
    with torch.no_grad():
        torch.testing.assert_close(made(x).double(), want, rtol=1e-5, atol=1e-6)
    backend = dynamo.Compiled.made[-1]
    key = next(iter(backend.versions))
    assert not any(r.kernel for r in backend.report[key])
    assert backend.rest[key].startswith("inductor (no region kept")
    opt = ax.optimize(NothingToKeep(), (x,), cache_dir=str(tmp_path), **OPTS)
    key = next(iter(opt.compiled.versions))
    assert opt.compiled.rest[key].startswith("inductor (no region kept")
    assert isinstance(opt.compiled.versions[key], torch._dynamo.eval_frame.OptimizedModule)
    path = opt.save(tmp_path / "nothing_kept.py")
    spec = importlib.util.spec_from_file_location("nothing_kept", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    assert mod._AXON_EG_KEPT is False
    with torch.no_grad():
        torch.testing.assert_close(mod.ModelNew()(x).double(), want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(opt(x).double(), want, rtol=1e-5, atol=1e-6)


def test_splice_keeps_every_output_a_region_hands_back_and_never_aliases(tmp_path):
    """A region output that is its input (``x.float()`` of a float tensor) is wired to that input, outside
    the op; the custom op returns new tensors only."""

    class HandsBack(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            y = x.float()
            s = torch.softmax(y * 2.0, dim=-1)
            return s + 1.0, torch.roll(s, 1, 0), y

    x = torch.randn(4, 10)
    opt = ax.optimize(HandsBack(), (x,), cache_dir=str(tmp_path), **OPTS)
    with torch.no_grad():
        got, want = opt(x), HandsBack()(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    key = next(iter(opt.compiled.versions))
    assert opt.compiled.rest[key] == "inductor" and any(r.kernel for r in opt.report)


def _rewrite_rows(bundle: str, median: dict[str, float]) -> None:
    """The bundle's measured rows with the latencies given (by id; a candidate not named: 1 ms)."""
    path = os.path.join(bundle, "rows.jsonl")
    rows = [json.loads(line) for line in open(path)]
    for row in rows:
        if row.get("status") == "ok":
            row["median_us"] = median.get(row["id"], 1000.0 if row["kind"] == "candidate" else row.get("median_us"))
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


@pytest.mark.slow  # Inductor compiles the region twice per case: 10 s each (make test-slow, CI)
@pytest.mark.parametrize("inductor_wins", [True, False])
def test_a_region_is_spliced_only_when_it_beats_its_inductor_code_in_the_measured_rows(tmp_path, inductor_wins):
    """Remote flow: each region's bundle holds its eager and its Inductor (default mode) baselines; with rows
    in which Inductor's code is faster than every candidate the region stays Inductor's, with rows in which
    a candidate beats both it is spliced."""
    from axon_eg.measure.cli import main as worker

    torch.manual_seed(2)
    model = AroundAnUnimportedOp().eval()
    with torch.device("meta"):
        x = torch.empty(3, 12)
    remote = tmp_path / "remote"
    first = ax.optimize(model.to("meta"), (x,), remote=str(remote), **OPTS)
    bundles = sorted({r.bundle for r in first.report if r.bundle})
    assert bundles
    for b in bundles:
        manifest = json.loads(open(os.path.join(b, "manifest.json")).read())
        assert {c["id"] for c in manifest["candidates"]} >= {"torch_eager", "torch_compile_default"}
    assert worker([*bundles, "--cpu"]) == 0
    for b in bundles:
        ids = [json.loads(line)["id"] for line in open(os.path.join(b, "rows.jsonl"))]
        cands = sorted(i for i in ids if i.startswith("c"))
        fast = {"torch_eager": 50.0, "torch_compile_default": 5.0 if inductor_wins else 40.0, cands[0]: 20.0}
        _rewrite_rows(b, fast)
    second = ax.optimize(model.to("meta"), (x,), remote=str(remote), **OPTS)
    measured = [r for r in second.report if r.bundle]
    if inductor_wins:
        assert all(r.kernel is None and "torch_compile_default" in r.why_torch for r in measured), \
            [r.line() for r in measured]
    else:
        assert all(r.kernel for r in measured), [r.line() for r in measured]


def test_remote_phase_one_writes_every_regions_bundle_once_with_its_seconds(tmp_path):
    """The remote flow's phase 1 runs a version's regions in parallel child processes (two or more regions):
    each region's bundle is written, its phase-1 seconds recorded; a second build writes none again."""
    with torch.device("meta"):
        model = AroundAnUnimportedOp().eval()
        x = torch.empty(3, 12)
    remote = tmp_path / "remote"
    first = ax.optimize(model, (x,), remote=str(remote), **OPTS)
    waiting = [r for r in first.report if r.bundle]
    assert len(waiting) == 2 and all(r.phase1_s and r.phase1_s > 0 for r in waiting), [r.line() for r in first.report]
    stamps = {b: os.stat(os.path.join(b, "manifest.json")).st_mtime_ns for b in (r.bundle for r in waiting)}
    second = ax.optimize(model, (x,), remote=str(remote), **OPTS)
    assert sorted(r.bundle for r in second.report if r.bundle) == sorted(stamps)
    assert all(os.stat(os.path.join(b, "manifest.json")).st_mtime_ns == t for b, t in stamps.items())


class ConstantTable(nn.Module):
    """A sinusoidal table computed from ``torch.arange`` alone (no input reaches it), then used with the input."""

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        freqs = torch.exp(torch.arange(0, 8, dtype=torch.float32) * -0.5)
        args = t[:, None] * freqs[None, :]
        return torch.cat([args.sin(), args.cos()], dim=-1)


def test_a_region_that_reads_no_input_is_left_to_the_code_around_it(tmp_path):
    t = torch.rand(5) * 100
    opt = ax.optimize(ConstantTable(), (t,), cache_dir=str(tmp_path), **OPTS)
    with torch.no_grad():
        torch.testing.assert_close(opt(t).double(), ConstantTable()(t.double()), rtol=1e-5, atol=1e-5)
    reasons = [r.why_torch or "" for r in opt.report]
    assert any("reads no input" in w for w in reasons) or all(r.kernel for r in opt.report), [r.line() for r in opt.report]


class GeluLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(12, 12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.proj(x)) * 0.5 + x


class TwoLayersAroundAnUnimportedOp(nn.Module):
    """Two identical layers (parameters ``first.*`` and ``second.*``) on either side of ``logcumsumexp``."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = GeluLayer(), GeluLayer()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.logcumsumexp(self.first(x), dim=-1))


class OneLayerUnderAnotherName(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = GeluLayer()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def test_identical_blocks_share_one_bundle_across_layers_and_models(tmp_path):
    """A region's bundle is keyed by its program with the inputs named by position (``dynamo.by_position``):
    two layers of one model that differ only in their parameters' names get one bundle, and another model
    holding the same layer under another name finds it written (nothing rewritten)."""
    with torch.device("meta"):
        two, one = TwoLayersAroundAnUnimportedOp().eval(), OneLayerUnderAnotherName().eval()
        x = torch.empty(3, 12)
    remote = tmp_path / "remote"
    first = ax.optimize(two, (x,), remote=str(remote), **OPTS)
    bundles = {r.bundle for r in first.report if r.bundle}
    assert len([r for r in first.report if r.bundle]) == 2 and len(bundles) == 1, [r.line() for r in first.report]
    (bundle,) = bundles
    stamp = os.stat(os.path.join(bundle, "manifest.json")).st_mtime_ns
    other = ax.optimize(one, (x,), remote=str(remote), **OPTS)
    assert [r.bundle for r in other.report if r.bundle] == [bundle]
    assert os.stat(os.path.join(bundle, "manifest.json")).st_mtime_ns == stamp


class PositionsOnTheInputsDevice(nn.Module):
    """A table made in ``forward`` on the input's device (``torch.arange(..., device=x.device)``), used with it
    and with a parameter: on the meta device (or a GPU) the factory's device is not the importer's CPU."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(x.shape[-1], device=x.device, dtype=x.dtype)
        return torch.sin(x * self.scale + pos.to(x.device)) * 2.0


def test_a_region_with_a_factory_on_the_inputs_device_is_bundled_on_the_meta_device(tmp_path):
    with torch.device("meta"):
        model = PositionsOnTheInputsDevice().eval()
        x = torch.empty(3, 8)
    opt = ax.optimize(model, (x,), remote=str(tmp_path / "remote"), **OPTS)
    assert [r for r in opt.report if r.bundle] and all(r.bundle for r in opt.report), [r.line() for r in opt.report]


@pytest.mark.slow  # a fresh interpreter and child processes: 7 s
def test_a_script_without_a_main_guard_builds_remote_bundles_in_parallel_and_runs_once(tmp_path):
    """The remote flow's phase 1 starts child processes; a user script that calls ``ax.optimize`` at its top
    level is not imported again in them (it would run twice, or be refused by multiprocessing)."""
    import subprocess

    script = tmp_path / "user_script.py"
    script.write_text(
        "import torch, axon_eg as ax\n"
        f"from tests.test_dynamo import AroundAnUnimportedOp\n"
        "print('script body ran', flush=True)\n"
        "with torch.device('meta'):\n"
        "    model = AroundAnUnimportedOp().eval()\n"
        "    x = torch.empty(3, 12)\n"
        f"opt = ax.optimize(model, (x,), remote={str(tmp_path / 'remote')!r}, k=2, saturation_s=0.3)\n"
        "print('bundles', len({r.bundle for r in opt.report if r.bundle}), flush=True)\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.path.join(root, "src")])}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("script body ran") == 1 and "bundles 2" in proc.stdout, proc.stdout + proc.stderr[-2000:]


class HandsOnItsPositions(nn.Module):
    """Returns a tensor made in ``forward`` (``torch.arange``) as it is, beside one computed from it."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pos = torch.arange(x.shape[-1], dtype=x.dtype)
        return torch.tanh(x) * 2.0 + pos, pos


@pytest.mark.slow  # about 8 s: a model through the backend and its saved file
def test_a_region_handing_on_a_tensor_it_makes_is_left_to_the_code_around_it_and_runs(tmp_path):
    x = torch.rand(3, 8) + 0.5
    opt = ax.optimize(HandsOnItsPositions(), (x,), cache_dir=str(tmp_path), **OPTS)
    with torch.no_grad():
        got, want = opt(x), HandsOnItsPositions()(x.double())
    for g, w in zip(got, want):
        torch.testing.assert_close(g.double(), w, rtol=1e-5, atol=1e-5)
    reasons = " ".join(r.why_torch or "" for r in opt.report)
    assert "hands on" in reasons or all(r.kernel for r in opt.report), [r.line() for r in opt.report]


@pytest.mark.parametrize("siblings", [2, 3])
def test_gemms_that_read_one_activation_count_once_and_stay_in_one_run(siblings):
    """Sibling GEMMs (the same first operand: q, k and v; gate and up) merge into one GEMM over stacked weights,
    so they count once toward ``max_contractions`` and a cut never separates them when one run can hold them;
    a GEMM reading another activation still counts."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(8, 8, device="meta")
    outs = []
    for k in range(siblings):
        w = graph.placeholder(f"w{k}")
        w.meta["val"] = torch.empty(8, 8, device="meta")
        node = graph.call_function(torch.ops.aten.mm.default, (x, w))
        node.meta["val"] = torch.empty(8, 8, device="meta")
        outs.append(node)
    total = outs[0]
    for o in outs[1:]:
        total = graph.call_function(torch.ops.aten.add.Tensor, (total, o))
        total.meta["val"] = torch.empty(8, 8, device="meta")
    last = graph.call_function(torch.ops.aten.mm.default, (total, outs[0]))
    last.meta["val"] = torch.empty(8, 8, device="meta")
    graph.output(last)
    nodes = [n for n in graph.nodes if n.op == "call_function"]
    runs = partition.cut_region(nodes, 64, 1)
    assert len(runs) == 2 and set(outs) <= set(runs[0]) and last in runs[1]


class StridedHandOff(nn.Module):
    """``nn.MultiheadAttention``'s tail: SDPA over heads laid out seq-first, then ``permute(2, 0, 1, 3)
    .contiguous().view(...)``; the export drops the ``contiguous`` (SDPA's output is in that order already), so
    the view relies on SDPA's strides."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.out = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [L, B, 16], seq-first
        length, batch, _ = x.shape
        q = self.q(x).view(length, batch * 2, 8).transpose(0, 1).view(batch, 2, length, 8)
        y = torch.nn.functional.scaled_dot_product_attention(q, q, q)
        return self.out(y.permute(2, 0, 1, 3).contiguous().view(length * batch, 16))


def test_a_view_that_relies_on_a_cut_producers_strides_still_runs(tmp_path):
    """The region before the cut writes its output row-major, not in the strides the export saw: every view of
    the graph is a reshape (``regions.views_as_reshapes``), so the code after the cut reads it either way."""
    model, x = StridedHandOff().eval(), torch.randn(5, 3, 16)
    with torch.no_grad(), warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        want = model.double()(x.double())
        model.float()
        fast = ax.optimize(model, (x,), k=1, saturation_s=0.3, cache_dir=str(tmp_path / "cache"), region_contractions=1)
        got = fast(x)
    assert (got.double() - want).abs().max().item() < 1e-4
    assert not [str(w.message) for w in said if "Inductor failed" in str(w.message)]  # Inductor's code, not eager
