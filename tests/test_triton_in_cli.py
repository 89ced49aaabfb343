"""``axon-eg optimize-triton`` from the command line, in a child process as a user runs it (issue 48): small
sizes under ``--cpu`` with progress lines as it goes (item 5), a spec checked whole before anything runs (item
6), sizes over the memory or the interpreter refused before anything is allocated (item 8), a descriptive
``--help`` and ``axon-eg --version`` (item 11)."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import json  # noqa: E402
import queue  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from axon_eg.testing.subprocesses import wait  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "triton_in"
CORPUS = ROOT / "benchmarks" / "triton_inputs"
T2T, REF = DATA / "scale_add_t2t.py", DATA / "scale_add_ref.py"
ENV = {**os.environ, "TRITON_INTERPRET": "1", "AXON_EG_FORCE_CPU": "1", "COLUMNS": "100"}


def start(*args: object) -> subprocess.Popen:
    """``axon-eg ARGS`` in a child, its stdout and stderr pipes."""
    return subprocess.Popen([sys.executable, "-m", "axon_eg.cli", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)


def one_error_line(code: int, err: str) -> str:
    """The single ``axon-eg: error: ...`` line of a refused run (exit status 2, no traceback)."""
    assert code == 2 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("axon-eg: error: "), err
    return lines[0].removeprefix("axon-eg: error: ")


# -- item 5: --cpu takes SMALL_SIZES as optimize does, and says what it does as it goes -------------
BIG_SOFTMAX = (DATA / "softmax_kb.py").read_text().replace(
    "rows, cols = 37, 100", 'rows, cols = 4096, 11008\nSMALL_SIZES = {"rows": 3, "cols": 5}')


@pytest.mark.slow  # an end-to-end CLI run (make test's 5 minutes; CI runs it in make test-slow)
def test_cpu_runs_a_kernelbench_file_at_its_small_sizes_with_progress_lines(tmp_path):
    path = tmp_path / "softmax_big.py"
    path.write_text(BIG_SOFTMAX)
    with open(tmp_path / "stderr", "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "axon_eg.cli", "optimize-triton", str(path), "--cpu", "--out",
                                 str(tmp_path / "out")], stdout=subprocess.PIPE, stderr=stderr, text=True, env=ENV, cwd=ROOT)
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout], daemon=True)
    reader.start()
    try:  # load starts; the sizes, before any candidate is checked
        early = [lines.get(timeout=60) for _ in range(2)]
        running = proc.poll() is None
    except queue.Empty:
        early, running = [], False
    finally:
        try:
            code = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            reader.join(10)
    err = (tmp_path / "stderr").read_text()
    rest = "".join(lines.queue)
    assert early, "no line within a minute"
    assert code == 0, err
    assert running, "the first lines came only when the run had ended"
    assert early[0].startswith("[") and "load 0/1: softmax_big.py" in early[0]
    assert early[1].strip() == "--cpu without --full: using the file's small sizes rows=3, cols=5 (SMALL_SIZES; --full " \
                               "for its own sizes)"
    printed = rest.splitlines()
    done = [ln.split("] ", 1)[1].split(" ", 1)[0] for ln in printed if ln.startswith("[") and " done" in ln]
    assert done == ["load", "stages", "nugraph", "measure", "combine", "select"], rest
    assert any(ln.startswith("[") and " measure 1/" in ln for ln in printed), rest
    manifest = json.loads((tmp_path / "out" / "bundle" / "manifest.json").read_text())
    assert {tuple(c["inputs"][0]["shape"]) for c in manifest["candidates"]} == {(3, 5)}
    assert "best: input" in rest and "correctness only" in rest
    best = (tmp_path / "out" / "best.py").read_text()
    assert best.split("\n", 1)[1] == BIG_SOFTMAX  # the user's file with its own sizes, not the run's


# -- item 6: the spec, checked whole before anything runs -------------------------------------------
SPECS = {  # the three, in a child each
    "unknown dtype": ("inputs:\n  - {shape: [5, 33], dtype: float32}\ninit: [33]\n",
                      "inputs[0].dtype: unknown dtype 'float32' (did you mean 'fp32'? one of fp32, bf16"),
    "shape that does not fit init": ("inputs:\n  - {shape: [5, 34], dtype: fp32}\ninit: [33]\n",
                                     "inputs (shapes [[5, 34]]) do not fit init [33]: scale_add_ref.py's forward() at "),
    "misspelled key": ("inputs:\n  - {shape: [5, 33], dtype: fp32}\ninits: [33]\n",
                       "unknown key 'inits' (did you mean 'init'? a spec has inputs, init and small)"),
}
MORE_SPECS = {  # and more, in this process
    "misspelled input key": ("inputs:\n  - {shape: [5, 33], dtyp: bf16}\ninit: [33]\n",
                             "unknown key 'inputs[0].dtyp' (did you mean 'inputs[0].dtype'? an input has shape, dtype"),
    "wrong type": ("inputs:\n  - {shape: [5, 33]}\ninit: 33\n",
                   "init: must be a list of the __init__ arguments (e.g. [4096]), got int 33"),
    "a shape of strings": ("inputs:\n  - {shape: [5, '33']}\n", "inputs[0].shape: must be a list of ints >= 1"),
    "no inputs": ("init: [33]\n", "inputs is missing (a list of {shape: [...], dtype: fp32}"),
    "not a mapping": ("- 1\n", "a spec is a mapping with inputs"),
    "a bad positive": ("inputs:\n  - {shape: [5, 33], positive: 1}\ninit: [33]\n", "inputs[0].positive: must be true or"),
    "small that does not fit": ("inputs:\n  - {shape: [5, 33]}\ninit: [33]\nsmall:\n  inputs: [{shape: [2, 3]}]\n"
                                "  init: [33]\n", "small.inputs (shapes [[2, 3]]) do not fit small.init [33]: "),
    "init that does not fit": ("inputs:\n  - {shape: [5, 33]}\ninit: [33, 1, 2]\n",
                               "init [33, 1, 2] does not fit the reference: scale_add_ref.py's Model(*init) raised "
                               "TypeError: "),
}


def test_spec_errors_are_one_line_naming_the_file_and_the_key_before_anything_runs(tmp_path):
    procs = {}
    for i, (what, (text, _)) in enumerate(sorted(SPECS.items())):
        spec = tmp_path / f"spec{i}.yaml"
        spec.write_text(text)
        procs[what] = (spec, start("optimize-triton", T2T, "--reference", REF, "--spec", spec, "--cpu", "--out",
                                   tmp_path / f"out{i}"))
    for i, (what, (spec, proc)) in enumerate(sorted(procs.items())):
        line = one_error_line(*wait(proc)[::2])
        assert line.startswith(f"spec {spec}: {SPECS[what][1]}"), (what, line)
        assert not (tmp_path / f"out{i}" / "bundle").exists(), what  # nothing was written, nothing ran


@pytest.mark.parametrize("what", sorted(MORE_SPECS))
def test_every_part_of_a_spec_is_checked(tmp_path, capsys, what):
    from axon_eg import cli

    spec = tmp_path / "spec.yaml"
    spec.write_text(MORE_SPECS[what][0])
    assert cli.main(["optimize-triton", str(T2T), "--reference", str(REF), "--spec", str(spec), "--cpu", "--out",
                     str(tmp_path / "out")]) == 2
    line = one_error_line(2, capsys.readouterr().err)
    assert line.startswith(f"spec {spec}: {MORE_SPECS[what][1]}"), line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, message", [
    (["--spec", "SPEC", "--sizes", "rows=3"], "--sizes 'rows=3': with --spec the sizes are the spec's inputs and init"),
    (["--sizes", "height=3"], "--sizes 'height=3': scale_add_ref.py has no module-level 'height' (its integer constants: "
                              "none)"),
])
def test_sizes_that_cannot_apply_are_refused_before_the_import(tmp_path, capsys, argv, message):
    from axon_eg import cli

    spec = tmp_path / "spec.yaml"
    spec.write_text("inputs:\n  - {shape: [5, 33]}\ninit: [33]\n")
    argv = [a.replace("SPEC", str(spec)) for a in argv]
    assert cli.main(["optimize-triton", str(T2T), "--reference", str(REF), *argv, "--cpu", "--out", str(tmp_path / "o")]) == 2
    assert one_error_line(2, capsys.readouterr().err).startswith(message)


def test_the_spec_dtypes_in_help_are_the_harness_dtypes():
    from axon_eg.cli import SPEC_DTYPES
    from axon_eg.measure.harness import TORCH_DTYPES

    assert SPEC_DTYPES == tuple(TORCH_DTYPES)


# -- item 8: sizes over the interpreter or the memory, refused before anything is allocated ---------
HUGE = '''import torch
import torch.nn as nn
import triton
import triton.language as tl

batch_size, dim = 65536, 131072  # 32 GiB of fp32 input, and no SMALL_SIZES


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class Model(nn.Module):
    def forward(self, x):
        return x * 1.0


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''


@pytest.mark.slow  # an end-to-end CLI run (make test's 5 minutes; CI runs it in make test-slow)
def test_sizes_over_the_interpreter_or_the_memory_are_refused_naming_them(tmp_path):
    huge = tmp_path / "huge_kb.py"
    huge.write_text(HUGE)
    full = start("optimize-triton", CORPUS / "silu_mul_kb.py", "--cpu", "--full", "--out", tmp_path / "a")
    big = start("optimize-triton", huge, "--out", tmp_path / "b")
    line = one_error_line(*wait(full, 60)[::2])
    assert line.startswith("silu_mul_kb.py at its own sizes (inputs x0 [4096, 11008] fp32, x1 [4096, 11008] fp32): its "
                           "inputs and outputs (135,266,304 elements) need about 1.8 GiB with the float64 reference ("), line
    assert line.endswith("of memory available), over the 4,194,304 elements the Triton interpreter (--cpu) checks in "
                         "reasonable time; use smaller sizes (--sizes NAME=INT,... over its module constants, or drop "
                         "--full) or pass --allow-large"), line
    line = one_error_line(*wait(big, 60)[::2])
    assert line.startswith("huge_kb.py at its own sizes (inputs x0 [65536, 131072] fp32): its inputs and outputs "
                           "(17,179,869,184 elements) need about 256.0 GiB with the float64 reference, over 80% of the "), line
    assert line.endswith(" GiB of memory available; use smaller sizes (--sizes NAME=INT,... over its module constants) "
                         "or pass --allow-large"), line
    assert not (tmp_path / "a" / "bundle").exists() and not (tmp_path / "b" / "bundle").exists()


def test_allow_large_lets_the_run_go_on(tmp_path, monkeypatch, capsys):
    from axon_eg import cli, validate
    from axon_eg.triton_in import run

    class Reached(Exception):
        pass

    def stub(path, *, check, small, sizes, spec, reference, **_):
        from axon_eg.triton_in.spec import harness

        check(harness(reference or path, spec, small=small, sizes=sizes))
        raise Reached

    monkeypatch.setattr(run, "optimize_triton", stub)
    monkeypatch.setattr(validate, "INTERPRETER_ELEMS", 10)
    argv = ["optimize-triton", str(T2T), "--reference", str(REF), "--cpu", "--out", str(tmp_path)]
    assert cli.main(argv) == 2
    assert "over the 10 elements the Triton interpreter (--cpu)" in capsys.readouterr().err
    with pytest.raises(Reached):
        cli.main([*argv, "--allow-large"])


# -- exit status: nothing correct, the input included, is an error ----------------------------------
def test_a_run_in_which_nothing_ran_correctly_exits_2(tmp_path, monkeypatch, capsys):
    from axon_eg import cli
    from axon_eg.triton_in import run

    rows = [{"id": "input", "status": "crashed", "error": "RuntimeError: boom\nmore"},
            {"id": "c000", "status": "crashed", "error": "RuntimeError: boom"}]
    monkeypatch.setattr(run, "optimize_triton", lambda *a, **k: run.TritonResult("input", tmp_path / "best.py", rows, False,
                                                                                  tmp_path / "bundle"))
    assert cli.main(["optimize-triton", str(DATA / "softmax_kb.py"), "--cpu", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == (f"axon-eg: error: nothing ran correctly, the input included (2 rows: 2 crashed); the input: crashed: "
                   f"RuntimeError: boom; every row: {tmp_path / 'rows.json'}\n")


# -- item 11: --help says what it does, how sizes are chosen, the exit codes; --version ---------------
def test_help_describes_sizes_and_exit_codes_and_version_prints_the_version():
    helped, version = start("optimize-triton", "--help"), start("--version")
    code, out, err = wait(helped, 30)
    assert code == 0, err
    text = " ".join(out.split())
    for words in ("Optimize an existing Triton program", "Sizes: without --full, a KernelBench file runs at its "
                  "SMALL_SIZES", "a spec at its small: section", "--allow-large", "the Triton interpreter (--cpu, or no GPU)",
                  "An unknown key, dtype or value", "exit status: 0 the input ran correctly", "3 the input is wrong",
                  "2 an error", "130 / 143 interrupted"):
        assert words in text, words
    code, out, err = wait(version, 30)
    from importlib.metadata import version as dist_version

    assert code == 0 and out.strip() == f"axon-eg {dist_version('axon_eg')}", (out, err)
