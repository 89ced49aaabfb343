"""Triton to Triton (``axon_eg.triton_in``), on the CPU under the Triton interpreter: reading both input
forms, the launch-knob stage keeping results equal to the reference (hypothesis over its parameters), the
fixed-harness rule refusing candidates that touch anything but kernels, and one-line errors."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import json  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import axon_eg as ax  # noqa: E402
from axon_eg.hw import load as load_hw  # noqa: E402
from axon_eg.testing.kernels import import_file  # noqa: E402
from axon_eg.triton_in import TritonInputError, load  # noqa: E402
from axon_eg.triton_in.stages import LaunchKnobs, points, wrapper_unchanged  # noqa: E402

DATA = Path(__file__).parent / "data" / "triton_in"
SOFTMAX = DATA / "softmax_kb.py"


def _module(text: str, tmp_path: Path, name: str):
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return import_file(path, name)


def test_both_forms_are_read_kernels_launches_and_wrapper():
    kb = load(SOFTMAX)
    assert kb.wrapper == "ModelNew" and list(kb.kernels) == ["softmax_kernel"]
    assert kb.kernels["softmax_kernel"].constexprs == ("BLOCK",)
    assert [(launch.kernel, launch.keywords.get("num_warps")) for launch in kb.launches] == [("softmax_kernel", 4)]
    t2t = load(DATA / "scale_add_t2t.py")
    assert t2t.wrapper == "Model" and t2t.launches[0].keywords == {"BLOCK": 256}


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_every_launch_knob_point_keeps_the_result_of_the_reference(tmp_path_factory, data):
    tf = load(SOFTMAX)
    space = LaunchKnobs().space(tf, load_hw("h200"))
    point = data.draw(st.sampled_from(space))
    text = LaunchKnobs().apply(tf, point)
    assert wrapper_unchanged(tf, text) is None
    assert f"num_warps={point['num_warps']}" in text and "num_stages" not in point  # no loop: nothing to pipeline
    mod = _module(text, tmp_path_factory.mktemp("knobs"), f"knobs_{point['num_warps']}")
    rows, cols = data.draw(st.integers(1, 9)), data.draw(st.integers(1, 70))
    x = torch.randn(rows, cols) * data.draw(st.floats(0.1, 10.0))
    want = mod.Model()(x.double())
    got = mod.ModelNew()(x)
    assert torch.allclose(got.double(), want, rtol=1e-5, atol=1e-6)


def test_the_input_file_itself_is_the_baseline_and_stays_unless_beaten(tmp_path):
    result = ax.optimize_triton(SOFTMAX, out=tmp_path / "out", device="cpu", nugraph_k=0)
    ids = [r["id"] for r in result.rows]
    assert ids[0] == "input" and len(ids) == 1 + len(points(load(SOFTMAX), load_hw("h200")))
    assert all(r["status"] == "ok" for r in result.rows), [r for r in result.rows if r["status"] != "ok"]
    assert result.best == "input" and not result.timed  # the CPU checks, it does not time
    best = result.best_path.read_text()
    assert best.startswith("# axon_eg optimize-triton: softmax_kb.py; stage applied: none")
    assert best.split("\n", 1)[1] == SOFTMAX.read_text()
    assert json.loads((tmp_path / "out" / "rows.json").read_text())[1]["transform"] == "launch_knobs"


def test_the_triton_to_triton_form_takes_its_reference_and_inputs_apart(tmp_path):
    with pytest.raises(TritonInputError, match="give the PyTorch reference"):
        ax.optimize_triton(DATA / "scale_add_t2t.py", out=tmp_path / "a", device="cpu")
    spec = tmp_path / "spec.yaml"
    spec.write_text("inputs:\n  - {shape: [5, 33], dtype: fp32}\ninit: [33]\n")
    result = ax.optimize_triton(DATA / "scale_add_t2t.py", reference=DATA / "scale_add_ref.py", spec=spec,
                                out=tmp_path / "b", device="cpu")
    assert {r["status"] for r in result.rows} == {"ok"}
    manifest = json.loads((result.bundle / "manifest.json").read_text())
    assert manifest["candidates"][0]["inputs"] == [{"name": "x0", "shape": [5, 33], "dtype": "fp32"}]


CHEATS = {
    "the wrapper computes the answer in torch": ("        return y\n", "        return torch.softmax(x, dim=-1)\n"),
    "the inputs are changed": ("    return [torch.randn(rows, cols)]", "    return [torch.zeros(rows, cols)]"),
    "a module constant is changed": ("rows, cols = 37, 100", "rows, cols = 1, 1"),
    "the grid is changed": ("softmax_kernel[(x.shape[0],)]", "softmax_kernel[(1,)]"),
    "a kernel is added": ("class Model(nn.Module):", "@triton.jit\ndef extra(x):\n    pass\n\n\nclass Model(nn.Module):"),
}


@pytest.mark.parametrize("what", sorted(CHEATS))
def test_a_candidate_touching_anything_but_kernels_and_launch_keywords_is_refused(what):
    tf = load(SOFTMAX)
    old, new = CHEATS[what]
    assert old in tf.text
    why = wrapper_unchanged(tf, tf.text.replace(old, new, 1))
    assert why is not None, what


def test_a_kernel_body_change_passes_the_rule_and_is_left_to_the_correctness_check():
    tf = load(SOFTMAX)
    wrong = tf.text.replace("e / tl.sum(e, axis=0)", "e")  # not the softmax any more: correctness rejects it
    assert wrapper_unchanged(tf, wrong) is None
    assert wrapper_unchanged(tf, tf.text.replace("BLOCK=triton.next_power_of_2(x.shape[1])", "BLOCK=128")) is None


def test_stages_whose_detector_finds_nothing_give_no_candidates():
    tf = load(SOFTMAX)
    autotuned = tf.text.replace("@triton.jit", "@triton.autotune(configs=[triton.Config({})], key=[])\n@triton.jit")
    # autotuned: no launch knobs, tiles or second autotune; only its loads and stores may still change
    assert {p.stage for p in points(load(SOFTMAX, autotuned), load_hw("h200"))} <= {"tensor_descriptors"}
    assert not points(tf, load_hw("trn2"))  # no warps on a NeuronCore


@pytest.mark.parametrize("text, message", [
    ("import torch\n", "no @triton.jit kernel"),
    ("import triton\n@triton.jit\ndef k(x):\n    pass\n", "kernel k is never launched"),
    ("import triton\n@triton.jit\ndef k(x):\n    pass\n\ndef f(x):\n    k[(1,)](x)\n", "no class ModelNew"),
    ("def f(:\n", "syntax error"),
])
def test_bad_input_files_get_one_line_naming_the_file(tmp_path, text, message):
    path = tmp_path / "bad.py"
    path.write_text(text)
    with pytest.raises(TritonInputError, match=message) as info:
        load(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_the_command_line_runs_it_and_words_user_errors_in_one_line(tmp_path, capsys):
    from axon_eg import cli

    assert cli.main(["optimize-triton", str(DATA / "scale_add_t2t.py"), "--cpu", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("axon-eg: error: ") and "--reference" in err and err.count("\n") == 1
    assert cli.main(["optimize-triton", str(DATA / "scale_add_t2t.py"), "--reference", str(DATA / "scale_add_ref.py"),
                     "--cpu", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "best: input" in out and (tmp_path / "best.py").is_file()


class Scripted:
    """A proposer that returns prepared sources in turn and records the diagnostics it was given."""

    def __init__(self, *edits):
        self.edits, self.seen = list(edits), []

    def propose(self, source, diagnostics):
        self.seen.append(diagnostics)
        edit = self.edits.pop(0)
        if isinstance(edit, Exception):
            raise edit
        return edit(source)


def _replace(old, new):
    def edit(source):
        assert old in source
        return source.replace(old, new, 1)
    return edit


SKIP_WORK = _replace("tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)",
                     "tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=offs < n_cols // 2)")
CACHE = _replace("        y = torch.empty_like(x)\n",
                 "        if hasattr(self, 'cached'):\n            return self.cached\n        y = torch.empty_like(x)\n")
WRAPPER = _replace("        return y\n", "        return torch.softmax(x, dim=-1)\n")
BROKEN = _replace("    row = tl.program_id(0)", "    row = tl.program_id(0")
GOOD = _replace("num_warps=4)", "num_warps=2)")


def test_a_cheating_proposer_is_refused_at_the_right_stage_and_told_why(tmp_path):
    proposer = Scripted(WRAPPER, CACHE, SKIP_WORK, BROKEN, GOOD)
    result = ax.optimize_triton(SOFTMAX, out=tmp_path / "o", device="cpu", proposer=proposer, rounds=5, nugraph_k=0)
    by_id = {r["id"]: r for r in result.rows if r.get("transform") == "proposer"}
    assert by_id["p00"]["status"] == "wrapper_changed" and by_id["p00"]["stage"] == "wrapper"
    assert by_id["p01"]["status"] == "wrapper_changed"  # caching outputs needs the wrapper: refused there
    assert by_id["p02"]["status"] == "wrong_result" and by_id["p02"]["stage"] == "correctness"
    assert by_id["p03"]["status"] == "syntax_error" and by_id["p03"]["stage"] == "syntax"
    assert by_id["p04"]["status"] == "ok"  # the honest one, measured with the rest
    assert proposer.seen[0] is None and "Only the @triton.jit kernels" in proposer.seen[1]
    assert "wrong_result" in proposer.seen[3] and "syntax" in proposer.seen[4]


def test_a_failing_proposer_is_a_row_not_an_aborted_run(tmp_path):
    result = ax.optimize_triton(SOFTMAX, out=tmp_path / "o", device="cpu", proposer=Scripted(RuntimeError("offline")),
                                nugraph_k=0)
    row = next(r for r in result.rows if r.get("transform") == "proposer")
    assert row["status"] == "proposer_error" and "offline" in row["error"]
    assert result.best == "input"


def test_the_openai_compatible_adapter_sends_the_source_and_takes_the_code_block():
    import http.server
    import threading

    from axon_eg.triton_in.proposer import OpenAICompatible

    got = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the http.server API
            got["path"] = self.path
            got["body"] = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            got["auth"] = self.headers.get("Authorization")
            reply = {"choices": [{"message": {"content": "Here:\n```python\nprint('new')\n```\n"}}]}
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        os.environ["AXON_TEST_KEY"] = "k123"
        proposer = OpenAICompatible(f"http://127.0.0.1:{server.server_port}/v1", "some-model", "AXON_TEST_KEY")
        assert proposer.propose("SOURCE TEXT", "it was wrong") == "print('new')\n"
    finally:
        server.shutdown()
        os.environ.pop("AXON_TEST_KEY", None)
    assert got["path"] == "/v1/chat/completions" and got["auth"] == "Bearer k123"
    prompt = got["body"]["messages"][0]["content"]
    assert got["body"]["model"] == "some-model" and "SOURCE TEXT" in prompt and "it was wrong" in prompt


def test_the_autotune_stage_tunes_over_the_hardware_grid_keyed_by_the_size_arguments(tmp_path):
    from axon_eg.backends.triton import interpreter
    from axon_eg.triton_in.stages import AutotuneGrid

    interpreter.apply()  # the interpreter cannot time configs: the first one runs
    tf = load(SOFTMAX)
    hw = load_hw("h200")
    [point] = AutotuneGrid().space(tf, hw)
    assert point["key"] == ["n_cols", "BLOCK"]  # the launch passes x.shape[1] and next_power_of_2(x.shape[1])
    text = AutotuneGrid().apply(tf, point)
    assert wrapper_unchanged(tf, text) is None
    configs = len(hw.value("knobs.num_warps"))  # x 1 stage count: a kernel without a loop pipelines nothing
    assert text.count("triton.Config(") == configs and "num_warps=4)" not in text.split("class Model")[1]
    mod = _module(text, tmp_path, "autotuned_softmax")
    x = torch.randn(6, 45)
    assert torch.allclose(mod.ModelNew()(x).double(), mod.Model()(x.double()), rtol=1e-5, atol=1e-6)
    assert not AutotuneGrid().detect(load(SOFTMAX, text))  # already autotuned: nothing more to do


@pytest.mark.slow  # several seconds of subprocesses or the interpreter: make test-slow (CI) runs it
def test_the_reference_through_the_nugraph_gives_candidates_of_axon_eg_in_both_forms(tmp_path):
    for name, kwargs in (("softmax", {}), ("scale_add", {"reference": DATA / "scale_add_ref.py"})):
        path = SOFTMAX if name == "softmax" else DATA / "scale_add_t2t.py"
        result = ax.optimize_triton(path, out=tmp_path / name, device="cpu", nugraph_k=2, **kwargs)
        own = [r for r in result.rows if r.get("transform") == "nugraph"]
        assert len(own) == 2 and all(r["status"] == "ok" for r in own), own  # correct against the reference
        assert all(r["params"]["plan"] and r["params"]["lowering"].startswith("triton") for r in own)


def test_a_reference_the_importer_refuses_is_a_row_and_the_rest_runs(tmp_path):
    text = SOFTMAX.read_text().replace("return torch.softmax(x, dim=-1)", "return torch.softmax(torch.erfinv(x * 0) + x, dim=-1)")
    path = tmp_path / "erfinv_kb.py"
    path.write_text(text)
    result = ax.optimize_triton(path, out=tmp_path / "o", device="cpu", nugraph_k=2)
    row = next(r for r in result.rows if r["id"] == "nugraph")
    assert row["status"] == "import_refused" and "erfinv" in row["error"]
    assert any(r.get("transform") == "launch_knobs" and r["status"] == "ok" for r in result.rows)


def test_a_faster_kernel_of_axon_eg_is_chosen_and_written_with_what_it_reads(tmp_path, monkeypatch):
    from axon_eg.triton_in import run

    def timed(bundle, device):  # a GPU's rows, made up: axon_eg's first kernel the fastest
        manifest = json.loads((bundle / "manifest.json").read_text())["candidates"]
        rows = [{"id": c["id"], "status": "ok", "median_us": 5.0 if c["id"] == "g00" else 10.0} for c in manifest]
        (bundle / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return rows

    monkeypatch.setattr(run, "_measure", timed)
    result = ax.optimize_triton(SOFTMAX, out=tmp_path / "o", nugraph_k=2)
    assert result.best == "g00" and result.timed
    text = result.best_path.read_text()
    assert '"stage": "nugraph"' in text.splitlines()[0] and "def _axon_eg_entry" in text
    assert (tmp_path / "o" / "reference_model.py").read_text() == SOFTMAX.read_text()
    # the chosen file is a drop-in: its ModelNew, built as the input's is, computes the reference's result
    best = import_file(result.best_path, "axon_eg_best_softmax")
    x = torch.randn(37, 100)  # the sizes it was built for (a kernel of other sizes refuses them in one line)
    assert torch.allclose(best.ModelNew()(x).double(), import_file(SOFTMAX, "ref_softmax").Model()(x.double()),
                          rtol=1e-5, atol=1e-6)


def test_phase_two_elsewhere_prepare_here_the_worker_there_finish_here(tmp_path):
    """The remote flow: ``prepare`` writes the bundle (no measurement), the worker measures it as on a GPU
    box (here on the CPU), ``finish`` chooses from its rows; without rows it says what to run."""
    from axon_eg.measure.cli import main as worker
    from axon_eg.triton_in import finish, prepare

    root = prepare(SOFTMAX, out=tmp_path / "o", nugraph_k=1)
    assert (root / "bundle" / "manifest.json").is_file() and not (root / "bundle" / "rows.jsonl").exists()
    with pytest.raises(TritonInputError, match="python -m axon_eg.measure"):
        finish(root)
    assert worker([str(root / "bundle"), "--cpu"]) == 0
    result = finish(root)
    assert result.best == "input" and {r["status"] for r in result.rows} == {"ok"}
    assert result.best_path.read_text().split("\n", 1)[1] == SOFTMAX.read_text()


def test_the_dtype_stage_narrows_float64_work_in_kernels_only_and_the_result_holds(tmp_path):
    from axon_eg.triton_in.stages import DtypeCorrection

    text = (DATA / "scale_add_t2t.py").read_text().replace(
        "    x = tl.load(x_ptr + offs, mask=mask)\n",
        "    x = tl.load(x_ptr + offs, mask=mask).to(tl.float64)\n").replace(
        "    tl.store(y_ptr + offs, x * 2.0 + b, mask=mask)",
        "    tl.store(y_ptr + offs, (x * 2.0 + b).to(tl.float32), mask=mask)")
    text += "\n\nPRECISION = tl.float64  # module code outside the kernels: left as it is\n"
    path = tmp_path / "fp64_t2t.py"
    path.write_text(text)
    tf = load(path)
    stage = DtypeCorrection()
    assert stage.detect(tf) == ["scale_add_kernel"]
    [point] = stage.space(tf, load_hw("h200"))
    narrowed = stage.apply(tf, point)
    assert wrapper_unchanged(tf, narrowed) is None
    assert ".to(tl.float32)\n" in narrowed and narrowed.count("tl.float64") == 1  # the module constant
    assert not stage.detect(load(path, narrowed))
    result = ax.optimize_triton(path, reference=DATA / "scale_add_ref.py", out=tmp_path / "o", device="cpu",
                                nugraph_k=0)
    row = next(r for r in result.rows if r.get("transform") == "dtype_correction")
    assert row["status"] == "ok", row


def test_on_an_intel_xpu_the_launch_knobs_are_warps_register_file_and_warp_size():
    tf = load(SOFTMAX)
    hw = load_hw("intel-xe2")
    space = LaunchKnobs().space(tf, hw)
    cap = int(hw.value("knobs.large_grf_max_warps"))
    assert {p["grf_mode"] for p in space} == {str(g) for g in hw.value("knobs.grf_mode")}
    assert {p["warp_size"] for p in space} == {int(w) for w in hw.value("knobs.warp_size")}
    assert all(p["num_warps"] <= cap for p in space if p["grf_mode"] in ("256", "512"))
    point = next(p for p in space if p["grf_mode"] == "256" and p["warp_size"] == 16)
    text = LaunchKnobs().apply(tf, point)
    assert "grf_mode='256'" in text and "warp_size=16" in text and wrapper_unchanged(tf, text) is None
    assert all("num_stages" not in p for p in space)  # the stages stay as launched


def test_each_stage_and_kernel_winner_combined_on_one_file_and_measured_in_a_second_round(tmp_path):
    """Two kernels (SiLU, then the product): after a timed round in which one tile point per kernel won,
    ``combine`` writes both on one file; the worker's resume measures only that one (here its correctness)."""
    from axon_eg.measure.cli import main as worker
    from axon_eg.triton_in import combine, finish, prepare

    corpus = Path(__file__).resolve().parent.parent / "benchmarks" / "triton_inputs"
    small = tmp_path / "silu_mul_kb.py"
    small.write_text((corpus / "silu_mul_kb.py").read_text() + "\nROWS, COLS = 5, 77\n")
    root = prepare(small, out=tmp_path / "o", nugraph_k=0)
    manifest = json.loads((root / "bundle" / "manifest.json").read_text())["candidates"]
    fast = {}  # the last tile point of each kernel wins
    for c in manifest:
        if c["meta"]["stage"] == "tile_sizes":
            fast[c["meta"]["params"]["kernel"]] = c["id"]
    assert set(fast) == {"silu_kernel", "mul_kernel"}

    def us(c):
        if c["id"] == "input":
            return 10.0
        return 5.0 if c["id"] in fast.values() else 10.5  # slower than the input: not combined

    rows = [{"id": c["id"], "status": "ok", "median_us": us(c)} for c in manifest]
    (root / "bundle" / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert combine(root)
    assert not combine(root)  # once
    combined = (root / "bundle" / "combined.py").read_text()
    for kernel, cid in fast.items():
        p = next(c for c in manifest if c["id"] == cid)["meta"]["params"]
        block = p["tiles"]["BLOCK"]
        assert f"{kernel}[(triton.cdiv(n, {block}),)]" in combined and f"BLOCK={block}, num_warps={p['num_warps']}" in combined
    assert worker([str(root / "bundle"), "--cpu"]) == 0
    result = finish(root)
    row = next(r for r in result.rows if r["id"] == "combined")
    assert row["status"] == "ok" and [a["kernel"] for a in row["params"]["applied"]] == ["mul_kernel", "silu_kernel"]
