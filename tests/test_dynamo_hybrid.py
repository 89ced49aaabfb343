"""The hybrid backend (issue 49): the graph around axon_eg's regions is Inductor's, the kept regions spliced in
as opaque custom ops, and a region is kept only where it beats what Inductor makes of it."""

from __future__ import annotations

import json
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import axon_eg as ax  # noqa: E402
from axon_eg import dynamo  # noqa: E402
from axon_eg.errors import InvalidArgument  # noqa: E402

OPTS = {"k": 2, "saturation_s": 0.3}


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


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


@pytest.mark.parametrize("inductor_wins", [True, False])
def test_a_region_is_spliced_only_when_it_beats_its_inductor_code_in_the_measured_rows(tmp_path, inductor_wins):
    """Remote flow: each region's bundle holds its eager and its Inductor (default mode) baselines; with rows
    in which Inductor's code is faster than every candidate the region stays Inductor's, with rows in which
    a candidate beats both it is spliced."""
    from axon_eg.measure.worker import main as worker

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
