"""Helpers for tests that run user code in a fresh process: the guard a saved ``ModelNew`` file runs under
(any import of axon_eg fails), and waiting for a child without leaving it behind."""

from __future__ import annotations

import subprocess

NO_AXON_EG_IMPORT = '''
import importlib.abc, sys

class _NoAxon(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "axon_eg" or name.startswith("axon_eg."):
            raise ImportError(f"{name}: the saved file must not import axon_eg")
        return None

sys.meta_path.insert(0, _NoAxon())
'''
"""Script text: from here on, importing axon_eg (or any of its modules) raises ImportError naming it."""


def wait(proc: subprocess.Popen, timeout: float = 90) -> tuple[int, str, str]:
    """``proc``'s exit status, stdout and stderr; killed (and reaped) if it outlives ``timeout``."""
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out, err
