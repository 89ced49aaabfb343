"""The package as a wheel: what ``pip wheel .`` puts in it (setup.py's build hook copies ``data/hw_costs``),
and that the unpacked wheel runs outside the checkout. The full check, a fresh venv with ``pip install``,
is ``.ci/install-check`` (CI runs it after ``make test``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from axon_eg import hw

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "axon_eg"
BUILD_FILES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built, without build isolation, from a copy of what the build reads (no build/ in the checkout)."""
    tmp = tmp_path_factory.mktemp("wheel")
    tree = tmp / "tree"
    shutil.copytree(PACKAGE, tree / "src" / "axon_eg", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copytree(ROOT / "data" / "hw_costs", tree / "data" / "hw_costs")
    for name in BUILD_FILES:
        shutil.copy(ROOT / name, tree / name)
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                          "-w", str(tmp / "dist"), str(tree)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    (path,) = (tmp / "dist").glob("axon_eg-*.whl")
    return path


def _runtime_files() -> set[str]:
    """What the package reads at run time: every module, the rule and NKI stores, the hardware descriptions."""
    files = {f"axon_eg/{p.relative_to(PACKAGE)}" for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    files |= {f"axon_eg/{p.relative_to(PACKAGE)}" for p in PACKAGE.glob("rules_discovered/data/*.json")}
    files |= {f"axon_eg/{p.relative_to(PACKAGE)}" for p in PACKAGE.glob("backends/nki/data/*.json")}
    files |= {f"axon_eg/data/hw_costs/{p.name}" for p in hw.DATA_DIR.glob("*.yaml")}
    return files


def test_wheel_holds_what_runs(wheel: Path):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        missing = _runtime_files() - names
        assert not missing, f"the wheel lacks {sorted(missing)}"
        assert "axon_eg/suite.py" in names and "axon_eg/py.typed" in names
        for p in sorted(hw.DATA_DIR.glob("*.yaml")):  # copies of the one source, byte for byte
            assert z.read(f"axon_eg/data/hw_costs/{p.name}") == p.read_bytes()
        assert not [n for n in names if n.startswith(("benchmarks/", "tests/", "data/"))]


@pytest.mark.slow
def test_unpacked_wheel_runs_outside_the_checkout(wheel: Path, tmp_path: Path):
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    run = tmp_path / "run"
    run.mkdir()
    # PYTHONPATH puts the unpacked wheel before the editable install's path; the dependencies come from this venv.
    env = {**os.environ, "PYTHONPATH": str(site), "AXON_EG_CACHE": str(tmp_path / "cache")}
    script = ("import sys, axon_eg, axon_eg.hw as hw\n"
              "from axon_eg.cli import main\n"
              "assert axon_eg.__file__.startswith(sys.argv[1]), axon_eg.__file__\n"
              "assert str(hw.DATA_DIR).startswith(sys.argv[1]) and hw.load('h200').value('memory.hbm.capacity') > 0\n"
              "sys.exit(main(sys.argv[2:]))\n")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", script, str(site), *args], cwd=run, env=env,
                              capture_output=True, text=True, timeout=300)

    out = cli("suite")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "rmsnorm_matmul" in out.stdout
    out = cli("inspect", "rmsnorm")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "float64 reference ran" in out.stdout
    out = cli("show", "rmsnorm", "--rules", "discovered", "--iterations", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "saturation:" in out.stdout


def test_data_dir_prefers_the_packaged_copy(tmp_path: Path):
    package = tmp_path / "lib" / "axon_eg"
    package.mkdir(parents=True)
    assert hw.data_dir(package) == tmp_path / "data" / "hw_costs"  # a checkout: src/axon_eg -> data/hw_costs
    (package / "data" / "hw_costs").mkdir(parents=True)
    assert hw.data_dir(package) == package / "data" / "hw_costs"  # a wheel: axon_eg/data/hw_costs
    assert hw.DATA_DIR == hw.data_dir() and hw.DATA_DIR.is_dir()
