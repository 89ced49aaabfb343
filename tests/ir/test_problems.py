"""KernelBench-format problems: every benchmarks/problems file (its subfolders too: the held-out sets) loads
and its reference is torch's, in float64."""

from __future__ import annotations

import ast
import copy
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from torch._subclasses.fake_tensor import FakeTensor

from axon_eg.errors import AxonError, DtypeError, ProblemLoadError, ProgramError, ShapeError, UnsupportedOperation
from axon_eg.ir.inputs import random_inputs
from axon_eg.ir.interpret import interpret
from axon_eg.ir.torch_import import import_torch, load_problem
from axon_eg.ir.torch_import import small_sizes as read_small_sizes

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = sorted((ROOT / "benchmarks" / "problems").rglob("*.py"))


def _expected() -> dict[Path, str]:
    """``benchmarks/problems/*/expected.yaml``: problem file -> a word its load error must name (an op or
    dtype the IR lacks yet). Such a problem must fail to load with one clear line naming it, and the test
    fails as soon as it loads (then its entry goes)."""
    out: dict[Path, str] = {}
    for f in sorted((ROOT / "benchmarks" / "problems").rglob("expected.yaml")):
        for name, word in (yaml.safe_load(f.read_text()) or {}).items():
            assert (f.parent / name).exists(), f"{f}: no problem {name}"
            out[f.parent / name] = str(word)
    return out


EXPECTED = _expected()
LOADING = [p for p in PROBLEMS if p not in EXPECTED]


def small_sizes(path: Path) -> dict[str, int]:
    """The file's SMALL_SIZES overrides (read without running the file)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SMALL_SIZES" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def torch_float64(module: torch.nn.Module, inputs) -> np.ndarray:
    with torch.no_grad():
        xs = [torch.as_tensor(x) for x in inputs]
        out = copy.deepcopy(module).double()(*[x.double() if x.is_floating_point() else x for x in xs])
    return out.numpy()


def test_the_problem_set():
    assert len(PROBLEMS) >= 12
    for path in PROBLEMS:
        tree = ast.parse(path.read_text())
        doc = ast.get_docstring(tree)
        assert re.fullmatch(r"[a-z]?\d\d_\w+\.py", path.name), path.name
        assert doc and "\n" not in doc.strip(), f"{path.name}: needs a one-line docstring"
        imports = {alias.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                   for alias in (n.names if isinstance(n, ast.Import) else [ast.alias(n.module or "")])}
        assert imports <= {"torch"}, f"{path.name} imports {imports}"
        assert small_sizes(path), f"{path.name}: define SMALL_SIZES for the float64 equality check"


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT / "benchmarks" / "problems"))


@pytest.mark.parametrize("path", list(EXPECTED), ids=_rel)
def test_a_problem_that_does_not_load_yet_says_why_in_one_line(path):
    with pytest.raises(AxonError) as info:
        load_problem(path, sizes=small_sizes(path))
    message = str(info.value)
    assert "\n" not in message.strip() and EXPECTED[path] in message, message


@pytest.mark.parametrize("path", LOADING, ids=_rel)
def test_loads_as_is(path):
    problem = load_problem(path)
    program = problem.program
    assert program.name == path.stem and problem.path == path
    assert problem.inputs == program.inputs and program.free_dims == set()
    users = [s for s in problem.inputs if s.role == "input"]
    assert [s.shape for s in users] == [tuple(x.shape) for x in problem.example_inputs]
    assert set(problem.parameters) == {s.name for s in problem.inputs if s.role != "input"}
    state = {**dict(problem.module.named_parameters()), **dict(problem.module.named_buffers())}
    for name, value in problem.parameters.items():
        assert value.dtype == np.float64
        if name not in state:  # a tensor made in forward() (torch.arange): a buffer of the program's own
            assert name.startswith("_") and dict(program.roles)[name] == "buffer"
            continue
        np.testing.assert_array_equal(value, state[name].detach().double().numpy())
    assert all(isinstance(x, FakeTensor) for x in problem.example_inputs if isinstance(x, torch.Tensor))


@pytest.mark.parametrize("path", LOADING, ids=_rel)
def test_reference_matches_torch_float64(path):
    problem = load_problem(path, sizes=small_sizes(path))
    drawn = problem.random_inputs(seed=7)
    assert set(drawn) == {s.name for s in problem.inputs}
    assert all(drawn[name] is value for name, value in problem.parameters.items())
    assert all(drawn[s.name].shape == s.shape for s in problem.user_inputs)
    assert all(np.all(drawn[s.name] != 0) for s in problem.user_inputs if s.dtype.is_float)  # indices may be 0
    typed = [drawn[s.name].astype(s.dtype.numpy_name) if not s.dtype.is_float else drawn[s.name]
             for s in problem.user_inputs]  # integer and bool inputs in their own dtype for torch
    for inputs in (problem.file_inputs(), typed):
        np.testing.assert_allclose(problem.reference(inputs), torch_float64(problem.module, inputs),
                                   rtol=1e-7, atol=1e-10)


def test_reference_takes_inputs_by_name_or_position():
    problem = load_problem(PROBLEMS[0], sizes=small_sizes(PROBLEMS[0]))
    (x,) = problem.file_inputs()
    np.testing.assert_array_equal(problem.reference({"x": x}), problem.reference([x]))
    with pytest.raises(ProgramError, match="takes 1 user inputs"):
        problem.reference([x, x])


def test_seeded_loading_is_reproducible():
    a, b = load_problem(PROBLEMS[0], sizes=small_sizes(PROBLEMS[0])), load_problem(PROBLEMS[0],
                                                                                     sizes=small_sizes(PROBLEMS[0]))
    assert a.program == b.program
    for name in a.parameters:
        np.testing.assert_array_equal(a.parameters[name], b.parameters[name])
    torch.testing.assert_close(a.file_inputs()[0], b.file_inputs()[0])
    torch.testing.assert_close(a.file_inputs()[0], a.file_inputs()[0])


# ------------------------------------------------------------------------------------------------
# Error paths
# ------------------------------------------------------------------------------------------------
GOOD = '''"""A good problem."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(2, 3)]


def get_init_inputs():
    return []
'''


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_minimal_file_loads(tmp_path):
    problem = load_problem(write(tmp_path, "good.py", GOOD))
    assert problem.program.name == "good" and [s.name for s in problem.inputs] == ["x"]


def test_missing_file(tmp_path):
    with pytest.raises(ProblemLoadError, match="nope.py: no such problem file"):
        load_problem(tmp_path / "nope.py")


def test_syntax_error_names_file_and_line(tmp_path):
    path = write(tmp_path, "broken.py", GOOD.replace("def get_inputs():", "def get_inputs(:"))
    line = GOOD.splitlines().index("def get_inputs():") + 1
    with pytest.raises(ProblemLoadError, match=rf"broken\.py:{line}: syntax error"):
        load_problem(path)


@pytest.mark.parametrize("missing", ["get_inputs", "get_init_inputs", "Model"])
def test_missing_definitions(tmp_path, missing):
    text = GOOD.replace(f"def {missing}(", "def renamed(").replace(f"class {missing}(", "class Renamed(")
    with pytest.raises(ProblemLoadError, match=rf"incomplete\.py: missing {missing}\b"):
        load_problem(write(tmp_path, "incomplete.py", text))


def test_get_inputs_raising(tmp_path):
    path = write(tmp_path, "raises.py", GOOD.replace("return [torch.randn(2, 3)]", "raise ValueError('no data')"))
    with pytest.raises(ProblemLoadError, match=r"raises\.py: get_inputs\(\) raised ValueError: no data"):
        load_problem(path)


def test_import_time_error_and_bad_model(tmp_path):
    with pytest.raises(ProblemLoadError, match=r"boom\.py: importing it raised ZeroDivisionError"):
        load_problem(write(tmp_path, "boom.py", GOOD + "\n1 / 0\n"))
    with pytest.raises(ProblemLoadError, match=r"notmodule\.py: Model must be a torch\.nn\.Module"):
        load_problem(write(tmp_path, "notmodule.py", GOOD + "\nModel = 3\n"))


def test_unknown_size_override(tmp_path):
    with pytest.raises(ProblemLoadError, match="'batch'"):
        load_problem(write(tmp_path, "good.py", GOOD), sizes={"batch": 2})


def test_unsupported_op_in_a_problem_names_its_line(tmp_path):
    path = write(tmp_path, "medians.py", GOOD.replace("torch.relu(x)", "torch.median(x, dim=-1)[0]"))
    line = GOOD.splitlines().index("        return torch.relu(x)") + 1
    with pytest.raises(UnsupportedOperation, match=rf"aten\.median\.dim at .*medians\.py:{line}"):
        load_problem(path)


def test_inputs_of_another_dtype_are_a_dtype_error(tmp_path):
    path = write(tmp_path, "bytes.py", GOOD.replace("torch.randn(2, 3)", "torch.arange(6).reshape(2, 3).to(torch.uint8)"))
    with pytest.raises(DtypeError, match="torch.uint8"):
        load_problem(path)


# ------------------------------------------------------------------------------------------------
# The benchmark suite's PyTorch modules import to the same function (when benchmarks/suite.py exists)
# ------------------------------------------------------------------------------------------------
try:
    from benchmarks.suite import SUITE
except ModuleNotFoundError as e:  # written concurrently by another engineer
    if e.name not in ("benchmarks.suite", "benchmarks"):
        raise
    SUITE = None


@pytest.mark.parametrize("entry", SUITE if SUITE else [None], ids=lambda e: e.name if e is not None else "absent")
def test_suite_torch_modules_import_to_the_same_function(entry):
    if entry is None:
        pytest.skip("benchmarks/suite.py does not exist yet")
    bound = entry.bound(small=True)
    arrays = random_inputs(bound, seed=11)
    tensors = [torch.from_numpy(arrays[s.name]).to(getattr(torch, s.dtype.torch_name)) for s in bound.inputs]
    imported = import_torch(entry.torch_module(), tuple(tensors), name=entry.name)
    users = [s.name for s in imported.program.inputs if s.role == "input"]
    got = interpret(imported.program, {**imported.state, **dict(zip(users, tensors))})
    with torch.no_grad():
        want = entry.torch_fn(*[t.double() for t in tensors])
    got = got if isinstance(got, tuple) else (got,)
    want = tuple(want) if isinstance(want, (tuple, list)) else (want,)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w.detach().double().numpy(), rtol=1e-7, atol=1e-9)


# ------------------------------------------------------------------------------------------------
# SMALL_SIZES, read without running the file; and what a problem file may not do
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", PROBLEMS, ids=lambda p: str(p.relative_to(ROOT / "benchmarks" / "problems")))
def test_small_sizes_are_read_without_running_the_file(path):
    assert read_small_sizes(path) == small_sizes(path)


def test_small_sizes_absent_or_malformed(tmp_path):
    assert read_small_sizes(write(tmp_path, "plain.py", GOOD)) is None
    line = len(GOOD.splitlines()) + 1
    for bad in ("SMALL_SIZES = {'n': 0}", "SMALL_SIZES = {'n': 2.5}", "SMALL_SIZES = dict(n=2)", "SMALL_SIZES = [2]"):
        with pytest.raises(ProblemLoadError, match=rf"bad\.py:{line}: SMALL_SIZES must be a literal dict"):
            read_small_sizes(write(tmp_path, "bad.py", GOOD + bad + "\n"))


def test_size_overrides_must_be_positive_ints(tmp_path):
    path = write(tmp_path, "sized.py", GOOD.replace("torch.randn(2, 3)", "torch.randn(n, 3)") + "n = 2\n")
    assert load_problem(path, sizes={"n": 5}).program.inputs[0].shape == (5, 3)
    for value in (0, -1, 2.0, True):
        with pytest.raises(ProblemLoadError, match=rf"sized\.py: sizes\['n'\] must be an int >= 1, got {value!r}"):
            load_problem(path, sizes={"n": value})


def test_a_problem_that_writes_its_input_is_refused_naming_it(tmp_path):
    path = write(tmp_path, "mutates.py", GOOD.replace("return torch.relu(x)", "x.add_(1)\n        return torch.relu(x)"))
    line = GOOD.splitlines().index("        return torch.relu(x)") + 1
    with pytest.raises(UnsupportedOperation, match=rf"mutates: forward\(\) writes its input 'x' in place "
                                                   rf"\(aten\.add_\.Tensor at .*mutates\.py:{line}\)"):
        load_problem(path)


def test_a_shape_mismatch_in_a_problem_names_its_line(tmp_path, capfd):
    text = GOOD.replace("def forward(self, x):", "def forward(self, x, y):").replace("torch.relu(x)", "x + y")
    path = write(tmp_path, "mismatch.py", text.replace("[torch.randn(2, 3)]", "[torch.randn(2, 3), torch.randn(4, 5)]"))
    line = GOOD.splitlines().index("        return torch.relu(x)") + 1
    with pytest.raises(ShapeError, match=rf"mismatch: forward\(\) at .*mismatch\.py:{line} \(`return x \+ y`\): "):
        load_problem(path)
    assert capfd.readouterr().err == ""


# ------------------------------------------------------------------------------------------------
# Phase 1 on shapes only
# ------------------------------------------------------------------------------------------------
def test_a_problem_written_for_a_gpu_loads_on_the_cpu(tmp_path):
    text = GOOD.replace("return [torch.randn(2, 3)]",
                        "return [torch.randn(2, 3, device='cuda').cuda().to('cuda:0'), torch.ones(3, device=0)]")
    text = text.replace("def forward(self, x):\n        return torch.relu(x)",
                        "def forward(self, x, y):\n        return torch.relu(x) * y")
    problem = load_problem(write(tmp_path, "gpu.py", text))
    assert [s.shape for s in problem.user_inputs] == [(2, 3), (3,)]
    x, y = problem.file_inputs()
    assert x.device.type == "cpu" and y.device.type == "cpu"
    np.testing.assert_allclose(problem.reference([x, y]), torch_float64(problem.module, [x, y]), rtol=1e-12)


@pytest.mark.slow
def test_a_problem_with_40_gb_of_inputs_goes_through_phase_1(tmp_path):
    """get_inputs() would allocate 40 GB (more than the CI machine has): loading traces on fake tensors and
    phase 1 ships the reference to the device, so it runs in the memory of the program's shapes
    (``benchmarks/phase1_memory.py`` prints the peak; here a fresh process must simply get through)."""
    from benchmarks.phase1_memory import HUGE, run_one

    path = write(tmp_path, "b01_Huge.py", HUGE)
    row = run_one(path, k=1, saturation_s=0.5, cache=tmp_path / "cache")
    assert "error" not in row, row
    assert row["input_gb"] == pytest.approx(40.0) and row["reference"].startswith("reference.py")


SCALAR = GOOD.replace("def forward(self, x):\n        return torch.relu(x)",
                      "def forward(self, x, s):\n        return torch.relu(x) * s + BODY").replace(
    "return [torch.randn(2, 3)]", "return [torch.randn(2, 3), 2.5]")


def test_a_python_float_input_becomes_a_rank_0_program_input(tmp_path):
    problem = load_problem(write(tmp_path, "scalar.py", SCALAR.replace("BODY", "1.0")))
    assert [(s.name, s.shape, s.dtype.name) for s in problem.user_inputs] == [("x", (2, 3), "fp32"), ("s", (), "fp32")]
    x, s = problem.file_inputs()
    assert s == 2.5
    for value in (2.5, -0.75):  # the kernel takes s at call time: any value, not the one get_inputs() gave
        np.testing.assert_allclose(problem.reference([x, value]), torch_float64(problem.module, [x, value]), rtol=1e-12)


def test_a_python_float_used_as_a_number_is_baked_in(tmp_path):
    problem = load_problem(write(tmp_path, "branchy.py", SCALAR.replace("BODY", "(1.0 if s > 2 else 0.0)")))
    assert [s.name for s in problem.user_inputs] == ["x"]  # torch.export specialized forward on s = 2.5
