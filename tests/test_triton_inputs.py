"""The corpus of Triton inputs (``benchmarks/triton_inputs``, issue 22): each file, in either form, is read by
``triton_in.load`` (kernels, launches, wrapper), offers stage candidates, and computes its reference's result
under the Triton interpreter at small sizes (float64 reference, random inputs)."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

from axon_eg.hw import load as load_hw  # noqa: E402
from axon_eg.measure.harness import TORCH_DTYPES  # noqa: E402
from axon_eg.testing.kernels import close_to_reference, import_file  # noqa: E402
from axon_eg.triton_in import load  # noqa: E402
from axon_eg.triton_in.stages import points  # noqa: E402

CORPUS = Path(__file__).resolve().parent.parent / "benchmarks" / "triton_inputs"
KB = sorted(CORPUS.glob("*_kb.py"))
T2T = sorted(CORPUS.glob("*_t2t.py"))


def test_the_corpus_has_ten_inputs_in_both_forms():
    assert len(KB) >= 5 and len(T2T) >= 3 and len(KB) + len(T2T) >= 10
    for t2t in T2T:
        stem = t2t.name.removesuffix("_t2t.py")
        assert (CORPUS / f"{stem}_ref.py").is_file() and (CORPUS / f"{stem}.yaml").is_file(), stem


@pytest.mark.parametrize("path", KB + T2T, ids=lambda p: p.stem)
def test_every_input_is_read_and_offers_candidates(path):
    tf = load(path)
    assert tf.kernels and tf.launches
    assert tf.wrapper == ("ModelNew" if path.name.endswith("_kb.py") else "Model")
    assert points(tf, load_hw("h200"))


@pytest.mark.parametrize("path", KB, ids=lambda p: p.stem)
def test_every_kernelbench_input_matches_its_model(path):
    mod = import_file(path, f"corpus_{path.stem}")
    for k, v in mod.SMALL_SIZES.items():
        setattr(mod, k, v)
    init = mod.get_init_inputs()
    torch.manual_seed(0)
    ref = mod.Model(*init).double()
    torch.manual_seed(0)
    new = mod.ModelNew(*init)
    torch.manual_seed(1)
    xs = mod.get_inputs()
    with torch.no_grad():
        want = ref(*[x.double() for x in xs])
        got = new(*xs)
    assert close_to_reference(got, want), float((got.double() - want).abs().max())


@pytest.mark.parametrize("path", T2T, ids=lambda p: p.stem)
def test_every_triton_to_triton_input_matches_its_reference(path):
    stem = path.name.removesuffix("_t2t.py")
    small = yaml.safe_load((CORPUS / f"{stem}.yaml").read_text())["small"]
    mod = import_file(path, f"corpus_{path.stem}")
    ref_mod = import_file(CORPUS / f"{stem}_ref.py", f"corpus_{stem}_ref")
    torch.manual_seed(0)
    ref = ref_mod.Model(*small["init"]).double()
    torch.manual_seed(0)
    new = mod.Model(*small["init"])
    torch.manual_seed(1)
    xs = [torch.randn(s["shape"], dtype=TORCH_DTYPES[s["dtype"]]) for s in small["inputs"]]
    with torch.no_grad():
        want = ref(*[x.double() for x in xs])
        got = new(*xs)
    assert close_to_reference(got, want), float((got.double() - want).abs().max())


@pytest.mark.slow  # several seconds of subprocesses or the interpreter: make test-slow (CI) runs it
def test_the_corpus_benchmark_runs_end_to_end_at_small_sizes(tmp_path, capsys):
    sys.path.insert(0, str(CORPUS.parent.parent))
    from benchmarks import triton_to_triton as bench

    out = str(tmp_path / "run")
    assert bench.main(["build", out, "--small", "--k", "1", "--files", "rowsum_kb", "rmsnorm_t2t"]) == 0
    assert bench.main(["measure", out, "--cpu"]) == 0
    assert bench.main(["combine", out]) == 0  # nothing timed on the CPU: nothing to combine
    assert bench.main(["report", out]) == 0
    table = capsys.readouterr().out
    assert "| rowsum_kb |" in table and "| rmsnorm_t2t |" in table and "Error" not in table
