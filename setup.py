"""Build hook: the wheel carries the top-level ``data/hw_costs/*.yaml`` as ``axon_eg/data/hw_costs/``.

``data/hw_costs/`` stays the one source of every number about a chip (ARCHITECTURE.md, invariant 6) and
stays where it is in the repository; a wheel (``pip install .``, ``pip wheel .``) gets a copy inside the
package, which ``axon_eg.hw`` reads first. An editable install copies nothing: ``hw`` then reads the
checkout's ``data/hw_costs`` directly, so an edited description takes effect without reinstalling.
Everything else (metadata, dependencies, the other package data) is in ``pyproject.toml``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
HW_COSTS = ROOT / "data" / "hw_costs"
PACKAGED = ("axon_eg", "data", "hw_costs")  # where the copy lands inside the wheel


class BuildPyWithHwCosts(build_py):
    """``build_py`` plus a fresh copy of ``data/hw_costs/*.yaml`` into the build's ``axon_eg/data/hw_costs``."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        files = sorted(HW_COSTS.glob("*.yaml"))
        if not files:
            raise SystemExit(f"axon_eg build: no hardware descriptions in {HW_COSTS} (data/hw_costs/*.yaml); "
                             "build from a clone or an sdist that has them")
        dest = Path(self.build_lib, *PACKAGED)
        shutil.rmtree(dest, ignore_errors=True)  # a description removed from data/ must not linger in build/
        dest.mkdir(parents=True)
        for f in files:
            self.copy_file(str(f), str(dest / f.name), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        dest = Path(self.build_lib, *PACKAGED)
        return super().get_outputs(include_bytecode) + [str(dest / f.name) for f in sorted(HW_COSTS.glob("*.yaml"))]


setup(cmdclass={"build_py": BuildPyWithHwCosts})
