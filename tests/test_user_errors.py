"""Ordinary user errors give one line that names the culprit, exit status 2 and no traceback, before any work.

Through the CLI (``cli.main``, output captured) and the public API: out-of-range arguments (``-k 0``,
``--budget -1``), paths that are directories, missing, unreadable or unwritable, dtypes written as strings
or not handled, unknown ``ax.`` names, programs the importer cannot take (an input written in place,
data-dependent control flow, a shape mismatch), and a KernelBench file's small sizes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import axon_eg as ax
from axon_eg import cli, loading, validate
from axon_eg.errors import AxonError, InvalidArgument, PathError

ROOT = Path(__file__).resolve().parents[1]
RMSNORM = ROOT / "benchmarks" / "problems" / "06_RMSNorm.py"

PROGRAM = '''import axon_eg as ax


@ax.program(M=4, N=8)
def f(x: ax.Tensor["M", "N", DTYPE]):
    return BODY
'''

PROBLEM = '''"""A KernelBench problem."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return BODY


def get_inputs():
    return [torch.randn(2, 3)]


def get_init_inputs():
    return []
'''
BODY_LINE = PROBLEM.splitlines().index("        return BODY") + 1


def program_file(tmp_path: Path, dtype: str = '"bf16"', body: str = "ax.exp(x)", name: str = "prog.py") -> Path:
    path = tmp_path / name
    path.write_text(PROGRAM.replace("DTYPE", dtype).replace("BODY", body))
    return path


def problem_file(tmp_path: Path, body: str = "return torch.relu(x)", name: str = "problem.py", text: str = PROBLEM) -> Path:
    path = tmp_path / name
    path.write_text(text.replace("        return BODY", "\n".join("        " + line for line in body.splitlines())))
    return path


def run(capfd: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capfd.readouterr()
    return code, out, err


def one_error_line(capfd: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run the CLI; assert exit status 2 and exactly one line on stderr, ``axon-eg: error: ...``; return it."""
    code, _, err = run(capfd, *argv)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("axon-eg: error: "), err
    assert "Traceback" not in err
    return lines[0].removeprefix("axon-eg: error: ")


def read_only_dir(tmp_path: Path) -> Path:
    """A directory this process cannot write in (its mode; for root, a kernel file system that refuses it)."""
    d = tmp_path / "read-only"
    d.mkdir()
    d.chmod(0o555)
    if validate._cannot_write(d):
        return d
    for candidate in (Path("/sys/kernel"), Path("/proc/sys")):
        if candidate.is_dir() and validate._cannot_write(candidate):
            return candidate
    pytest.skip("no directory this user cannot write")


# ------------------------------------------------------------------------------------------------
# -k, --budget: checked before anything is loaded
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("option, value, message", [
    ("-k", "0", "-k must be an integer >= 1, got 0"),
    ("-k", "-3", "-k must be an integer >= 1, got -3"),
    ("--budget", "0", "--budget must be a number of seconds > 0, got 0.0"),
    ("--budget", "-1", "--budget must be a number of seconds > 0, got -1.0"),
    ("--budget", "inf", "--budget must be a number of seconds > 0, got inf"),
])
def test_out_of_range_options_are_refused(tmp_path, capfd, option, value, message):
    cache = tmp_path / "cache"
    assert one_error_line(capfd, "optimize", program_file(tmp_path), option, value, "--cpu", "--cache", cache) == message
    assert not cache.exists()  # refused before any work


# ------------------------------------------------------------------------------------------------
# Paths: the target, --hw, --out, --cache, --rows
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["inspect", "optimize"])
def test_target_directory_or_missing_file(tmp_path, capfd, command):
    assert one_error_line(capfd, command, tmp_path) == f"target {tmp_path}: is a directory, not a file"
    assert one_error_line(capfd, command, tmp_path / "nope.py") == f"target {tmp_path / 'nope.py'}: no such file"


def test_unreadable_target(tmp_path, capfd):
    path = program_file(tmp_path)
    path.chmod(0)
    if os.access(path, os.R_OK):
        pytest.skip("this user reads files whatever their mode (root)")
    assert one_error_line(capfd, "inspect", path) == f"target {path}: cannot read it (Permission denied)"


@pytest.mark.parametrize("make, message", [
    (lambda d: d, "is a directory, not a file"),
    (lambda d: d / "missing.yaml", "no such file"),
])
def test_hw_that_is_a_directory_or_missing(tmp_path, capfd, make, message):
    hw = make(tmp_path)
    line = one_error_line(capfd, "optimize", program_file(tmp_path), "--hw", hw, "--cpu", "--cache", tmp_path / "c")
    assert line == f"--hw {hw}: {message}"


def test_out_that_is_a_file_or_cannot_be_written(tmp_path, capfd):
    prog, cache = program_file(tmp_path), tmp_path / "cache"
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    assert one_error_line(capfd, "optimize", prog, "--cpu", "--out", a_file, "--cache", cache) == \
        f"--out {a_file}: is a file, not a directory"
    assert one_error_line(capfd, "optimize", prog, "--cpu", "--out", a_file / "sub", "--cache", cache) == \
        f"--out {a_file / 'sub'}: cannot create it: {a_file} is a file, not a directory"
    locked = read_only_dir(tmp_path)
    line = one_error_line(capfd, "optimize", prog, "--cpu", "--out", locked / "out", "--cache", cache)
    assert line.startswith(f"--out {locked / 'out'}: cannot create it in {locked}: ")
    assert not cache.exists()  # before phase 1, not after the whole pipeline ran


def test_cache_that_is_a_file_or_read_only(tmp_path, capfd):
    prog = program_file(tmp_path)
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    assert one_error_line(capfd, "optimize", prog, "--cpu", "--cache", a_file) == f"--cache {a_file}: is a file, not a directory"
    locked = read_only_dir(tmp_path)
    line = one_error_line(capfd, "optimize", prog, "--cpu", "--cache", locked, "--out", tmp_path / "out")
    assert str(locked) in line and "not writable" in line


def test_rows_that_is_a_directory(tmp_path, capfd):
    line = one_error_line(capfd, "optimize", program_file(tmp_path), "--rows", tmp_path, "--cache", tmp_path / "c")
    assert line == f"--rows {tmp_path}: is a directory, not a file"


# ------------------------------------------------------------------------------------------------
# Files: a KernelBench file without class Model; dtypes; unknown ax. names; other errors in the file
# ------------------------------------------------------------------------------------------------
def test_kernelbench_file_without_class_model_is_diagnosed_as_one(tmp_path, capfd):
    path = problem_file(tmp_path, text=PROBLEM.replace("class Model(", "class Net("))
    assert validate.target_kind(str(path)) == "kernelbench"
    line = one_error_line(capfd, "inspect", path)
    assert line.startswith(f"{path}: missing Model (a KernelBench problem defines class Model(nn.Module)")


def test_a_file_with_neither_program_nor_problem(tmp_path, capfd):
    path = tmp_path / "empty.py"
    path.write_text("x = 1\n")
    assert validate.target_kind(str(path)) == "program"
    assert one_error_line(capfd, "inspect", path).startswith(f"{path}: expected exactly one @ax.program at module level")


def test_string_dtype_is_the_dtype(tmp_path, capfd):
    code, out, err = run(capfd, "inspect", program_file(tmp_path, '"bf16"'))
    assert code == 0, err
    assert "f(x: bf16[M, N]) -> bf16[M, N]" in out


DEF_LINE = PROGRAM.splitlines().index('def f(x: ax.Tensor["M", "N", DTYPE]):') + 1


@pytest.mark.parametrize("dtype, body, line, message", [
    ("ax.int8", "ax.exp(x)", DEF_LINE, "ax.int8 does not exist: axon_eg has no int8 dtype; the dtypes are ax.bf16, "
                                       "ax.fp16, ax.fp32, ax.fp64, ax.int32, ax.int64, ax.bool_"),
    ('"uint8"', "ax.exp(x)", DEF_LINE, "ax.Tensor['M', 'N', 'uint8']: 'uint8' is not a dtype axon_eg handles"),
    ("ax.fp32", "ax.softmaxx(x)", DEF_LINE + 1, "ax.softmaxx does not exist; did you mean ax.softmax"),
])
def test_bad_dtypes_and_unknown_names_name_the_file_and_line(tmp_path, capfd, dtype, body, line, message):
    path = program_file(tmp_path, dtype, body)
    assert one_error_line(capfd, "inspect", path).startswith(f"{path}:{line}: {message}")


def test_other_errors_while_running_the_file_name_its_line(tmp_path, capfd):
    path = program_file(tmp_path, "ax.fp32", "ax.exp(undefined_name)")
    line = PROGRAM.splitlines().index("    return BODY") + 1
    assert one_error_line(capfd, "inspect", path) == \
        f"{path}:{line}: running it raised NameError: name 'undefined_name' is not defined"


# ------------------------------------------------------------------------------------------------
# The torch importer: an input written in place, data-dependent control flow, a shape mismatch
# ------------------------------------------------------------------------------------------------
def test_input_written_in_place_is_refused_naming_it(tmp_path, capfd):
    path = problem_file(tmp_path, "x.add_(1)\nreturn x * 2")
    line = one_error_line(capfd, "inspect", path)
    assert line.startswith(f"problem: forward() writes its input 'x' in place (aten.add_.Tensor at {path}:{BODY_LINE})")


@pytest.mark.parametrize("body, message", [
    ("if x.sum() > 0:\n    return x\nreturn -x", "problem: data-dependent control flow is not supported: forward() at "
                                                  "{path}:{line} (`if x.sum() > 0:`)"),
    ("return x / x.max().item()", "aten.item.default at {path}:{line}: `.item()` (a tensor's value read into Python) is "
                                  "not supported"),
])
def test_data_dependent_code_is_one_line_without_torch_logs(tmp_path, capfd, body, message):
    path = problem_file(tmp_path, body)
    assert one_error_line(capfd, "inspect", path).startswith(message.format(path=path, line=BODY_LINE))


def test_shape_mismatch_is_one_line_without_torch_logs(tmp_path, capfd):
    text = PROBLEM.replace("def forward(self, x):", "def forward(self, x, y):").replace(
        "[torch.randn(2, 3)]", "[torch.randn(2, 3), torch.randn(4, 5)]")
    path = problem_file(tmp_path, "return x + y", text=text)
    line = one_error_line(capfd, "inspect", path)
    assert line.startswith(f"problem: forward() at {path}:{BODY_LINE} (`return x + y`): Attempting to broadcast")


# ------------------------------------------------------------------------------------------------
# A KernelBench file's small sizes
# ------------------------------------------------------------------------------------------------
def test_kernelbench_file_runs_at_its_small_sizes_unless_full(capfd):
    small = loading.resolve_target(str(RMSNORM), small=True)
    assert small.kind == "kernelbench" and small.sizes == {"batch_size": 2, "seq_len": 3, "hidden_size": 16}
    assert small.program.inputs[0].shape == (2, 3, 16)
    assert small.note == "using the file's small sizes batch_size=2, seq_len=3, hidden_size=16 (SMALL_SIZES; --full " \
                         "for its own sizes)"
    assert loading.load_target(str(RMSNORM), small=False)[0].inputs[0].shape == (4, 256, 4096)
    given = loading.resolve_target(str(RMSNORM), small=True, sizes={"batch_size": 3})
    assert given.program.inputs[0].shape == (3, 3, 16) and given.note.startswith("using batch_size=3 as given over")
    code, out, err = run(capfd, "inspect", RMSNORM)
    assert code == 0 and "output 0: shape [2, 3, 16]" in out and "the file's small sizes" in out, err


def test_kernelbench_file_without_small_sizes_says_so(tmp_path):
    target = loading.resolve_target(str(problem_file(tmp_path)), small=True)
    assert target.sizes == {} and target.note == "using problem.py's own sizes: it defines no SMALL_SIZES"


def test_bad_sizes(tmp_path, capfd):
    with pytest.raises(InvalidArgument, match=r"sizes\['M'\] must be an integer >= 1, got 0"):
        loading.resolve_target(str(program_file(tmp_path)), small=True, sizes={"M": 0})
    with pytest.raises(SystemExit):  # argparse: usage and "argument --sizes: ..."
        cli.main(["inspect", str(program_file(tmp_path)), "--sizes", "M=x"])
    assert "--sizes 'M=x': M must be an integer >= 1, got 'x'" in capfd.readouterr().err


# ------------------------------------------------------------------------------------------------
# float64 programs: measured end to end where the harness handles fp64, else refused before phase 1
# ------------------------------------------------------------------------------------------------
def test_fp64_program_runs_or_is_refused_before_phase_1(tmp_path, capfd):
    from axon_eg.measure.harness import TORCH_DTYPES

    path, cache, out = program_file(tmp_path, "ax.fp64", "ax.exp(x) * 2.0"), tmp_path / "cache", tmp_path / "out"
    argv = ("optimize", path, "-k", "1", "--cpu", "--cache", cache, "--out", out)
    if "fp64" in TORCH_DTYPES:
        code, _, err = run(capfd, *argv)
        assert code == 0 and (out / "best.py").exists(), err
    else:
        assert one_error_line(capfd, *argv).startswith("f: input 'x' is fp64, which the measurement harness does not "
                                                       "handle")
        assert not cache.exists()


# ------------------------------------------------------------------------------------------------
# The API: the same checks, under the arguments' names, before any work
# ------------------------------------------------------------------------------------------------
@pytest.fixture
def bf16_program(tmp_path):
    @ax.program(M=4, N=8)
    def f(x: ax.Tensor["M", "N", "bf16"]):
        return ax.exp(x)

    return f


@pytest.mark.parametrize("kwargs, error, message", [
    ({"k": 0}, InvalidArgument, "k must be an integer >= 1, got 0"),
    ({"k": 2.5}, InvalidArgument, "k must be an integer >= 1, got 2.5"),
    ({"k": True}, InvalidArgument, "k must be an integer >= 1, got True"),
    ({"budget_s": 0}, InvalidArgument, "budget_s must be a number of seconds > 0, got 0"),
    ({"budget_s": float("nan")}, InvalidArgument, "budget_s must be a number of seconds > 0, got nan"),
    ({"hw": "DIR"}, PathError, "hw DIR: is a directory, not a file"),
    ({"cache_dir": "FILE"}, PathError, "cache_dir FILE: is a file, not a directory"),
    ({"rows": "DIR"}, PathError, "rows DIR: is a directory, not a file"),
])
def test_saturate_and_extract_checks_its_arguments_first(tmp_path, bf16_program, kwargs, error, message):
    from axon_eg.pipeline import saturate_and_extract, write_bundle_only

    (tmp_path / "FILE").write_text("")
    (tmp_path / "DIR").mkdir()
    kwargs = {k: str(tmp_path / v) if v in ("DIR", "FILE") else v for k, v in kwargs.items()}
    kwargs.setdefault("cache_dir", str(tmp_path / "cache"))
    message = message.replace("DIR", str(tmp_path / "DIR")).replace("FILE", str(tmp_path / "FILE"))
    with pytest.raises(error) as info:
        saturate_and_extract(bf16_program, device="cpu", **kwargs)
    assert str(info.value) == message and isinstance(info.value, AxonError)
    if "budget_s" not in kwargs and "rows" not in kwargs:
        with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
            write_bundle_only(bf16_program, **kwargs)
    assert not (tmp_path / "cache").exists()


def test_argparse_type_helpers():
    import argparse

    assert validate.k_type("3") == 3 and validate.budget_type("2.5") == 2.5
    for helper, text, message in ((validate.k_type, "0", "the value must be an integer >= 1, got 0"),
                                  (validate.k_type, "two", "expected an integer >= 1, got 'two'"),
                                  (validate.budget_type, "-1", "the value must be a number of seconds > 0, got -1.0")):
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            helper(text)


def test_an_unknown_baseline_is_named_before_any_work(tmp_path):
    from axon_eg import suite

    program = suite.get("silu").bound(small=True)
    with pytest.raises(InvalidArgument, match="baselines: 'torch_inductor' is not a baseline of target 'triton'"):
        ax.saturate_and_extract(program, baselines=["torch_inductor"], cache_dir=str(tmp_path))
    with pytest.raises(InvalidArgument, match="a list of baseline ids"):
        ax.write_bundle_only(program, baselines="torch_eager", cache_dir=str(tmp_path))
    assert not (tmp_path / "bundles").exists()


def test_from_torch_of_a_model_on_the_meta_device_names_the_parameter():
    import torch

    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    with pytest.raises(InvalidArgument, match=r"parameter '0\.weight' is on the meta device.*remote=DIR"):
        ax.from_torch(model, (torch.empty(2, 4, device="meta"),))
