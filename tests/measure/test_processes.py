"""Processes of phase 2: SIGTERM and SIGINT mid-candidate end the worker with one line and exit status 143 /
130, leave no process behind (the fork server, the candidate's child, what the child started), keep the
rows already written, and a rerun measures only the rest. The signal handlers are the caller's again
afterwards, and a plain script without a ``__main__`` guard is interrupted the same way."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from axon_eg.measure import interrupts
from axon_eg.measure.manifest import read_rows
from axon_eg.measure.worker import run_bundle

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")

PY = sys.executable
SPECS = [{"name": "x", "shape": [4, 8], "dtype": "fp32"}, {"name": "y", "shape": [4, 8], "dtype": "fp32"}]
GOOD = "import torch\ndef kernel(x, y, out):\n    torch.add(x, y, out=out)\n"
SLOW = """import os, subprocess, time
import torch
def kernel(x, y, out):
    if os.environ.get("AXON_TEST_SLOW"):  # only in the runs the test interrupts
        subprocess.Popen(["sleep", "120"])  # a grandchild in the child's process group
        time.sleep(120)
    torch.add(x, y, out=out)
"""
IDS = ["fast0", "fast1", "slow", "after"]


def make_bundle(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "ref.py").write_text("def ref(x, y):\n    return x + y\n")
    cands = []
    for cid in IDS:
        (root / f"{cid}.py").write_text(SLOW if cid == "slow" else GOOD)
        cands.append({"id": cid, "source": f"{cid}.py", "entry": "kernel", "inputs": SPECS, "reference": "ref.py:ref",
                      "timeout_s": 300})
    (root / "manifest.json").write_text(json.dumps({"program": "add", "candidates": cands}))
    return root


def processes() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, state, start time) of every process."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(d)] = (int(fields[1]), fields[0], fields[19])
    return out


def descendants(root: int) -> dict[int, str]:
    """pid -> start time of every living descendant of ``root``."""
    procs = processes()
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, state, start) in procs.items():
            if ppid == parent and pid not in found and state != "Z":
                found[pid] = start
                frontier.append(pid)
    return found


def alive(pid: int, start: str) -> bool:
    p = processes().get(pid)
    return p is not None and p[2] == start and p[1] != "Z"  # same process (not a reused pid), not a zombie


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().split("\0")
    except OSError:
        return []


def run_until_slow(cmd: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], dict[int, str]]:
    """Start ``cmd``; return it and its descendants once the slow candidate's grandchild ``sleep`` runs."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        tree = descendants(proc.pid)
        if any(cmdline(p)[:1] == ["sleep"] for p in tree):
            return proc, tree
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the slow candidate never started")


def assert_interrupted(proc: subprocess.Popen[str], tree: dict[int, str], sig: signal.Signals, out: Path,
                       done: int, status: int) -> None:
    assert len(tree) >= 3, tree  # the fork server, the candidate's child and its `sleep`
    proc.send_signal(sig)
    try:
        stdout, stderr = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # do not leave the processes behind for the next test
        for pid, start in [(proc.pid, ""), *tree.items()]:
            if not start or alive(pid, start):
                os.kill(pid, signal.SIGKILL)
        raise
    assert proc.returncode == status, (proc.returncode, stderr)
    assert stderr.splitlines() == [f"axon-eg: interrupted ({sig.name}) after {done} of {len(IDS)} kernels; rows kept in "
                                   f"{out}; run again to resume"], stderr
    deadline = time.monotonic() + 5  # SIGKILLed processes may take a moment to be gone
    while time.monotonic() < deadline and any(alive(p, s) for p, s in tree.items()):
        time.sleep(0.05)
    assert not [(p, cmdline(p)) for p, s in tree.items() if alive(p, s)]


@pytest.mark.slow  # an end-to-end CLI run (make test's 5 minutes; CI runs it in make test-slow)
def test_sigterm_and_sigint_kill_every_child_keep_rows_and_resume(tmp_path):
    bundle = make_bundle(tmp_path / "b")
    out = tmp_path / "rows.jsonl"
    cmd = [PY, "-m", "axon_eg.measure", str(bundle), "--out", str(out), "--cpu"]
    env = {**os.environ, "AXON_EG_FORCE_CPU": "1", "AXON_TEST_SLOW": "1"}
    proc, tree = run_until_slow(cmd, env)
    assert_interrupted(proc, tree, signal.SIGTERM, out, 2, 143)
    first = read_rows(out)
    assert [r["id"] for r in first] == ["fast0", "fast1"] and {r["status"] for r in first} == {"ok"}

    proc, tree = run_until_slow(cmd, env)  # resumes at `slow` (the fast ones are not run again)
    assert_interrupted(proc, tree, signal.SIGINT, out, 2, 130)
    assert read_rows(out) == first

    env.pop("AXON_TEST_SLOW")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"bundle": str(bundle), "out": str(out), "new_rows": 2,
                                                         "statuses": {"ok": 2}}
    rows = read_rows(out)
    assert rows[:2] == first and [r["id"] for r in rows] == IDS and {r["status"] for r in rows} == {"ok"}


SCRIPT = """
import sys
from axon_eg.measure import run_bundle
print("script body ran")
run_bundle(sys.argv[1], sys.argv[2], gpus=[])
print("not reached")
"""


def test_a_script_without_main_guard_is_interrupted_with_one_line(tmp_path):
    """The library path: an uncaught Interrupted prints its line only and the process ends by SIGINT."""
    bundle = make_bundle(tmp_path / "b")
    out = tmp_path / "rows.jsonl"
    script = tmp_path / "measure_it.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "AXON_EG_FORCE_CPU": "1", "AXON_TEST_SLOW": "1"}
    proc, tree = run_until_slow([PY, str(script), str(bundle), str(out)], env)
    assert_interrupted(proc, tree, signal.SIGINT, out, 2, -signal.SIGINT)
    assert proc.stdout is not None
    assert [r["id"] for r in read_rows(out)] == ["fast0", "fast1"]


def test_handlers_come_back_and_interrupted_is_not_an_exception(tmp_path):
    bundle = make_bundle(tmp_path / "b")
    (bundle / "fast0.py").write_text("def kernel(x, y, out)\n")  # a syntax error: no child, no server
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    (row,) = run_bundle(bundle, tmp_path / "o.jsonl", gpus=[], ids=["fast0"])
    assert row["status"] == "syntax_error"
    assert {s: signal.getsignal(s) for s in before} == before
    exc = interrupts.Interrupted(signal.SIGTERM, 3, 8, tmp_path / "o.jsonl")
    assert isinstance(exc, KeyboardInterrupt) and not isinstance(exc, Exception) and exc.exit_code == 143
    assert str(exc) == f"axon-eg: interrupted (SIGTERM) after 3 of 8 kernels; rows kept in {tmp_path / 'o.jsonl'}; " \
                       "run again to resume"


@pytest.mark.slow
def test_a_dead_server_or_parent_leaves_nothing_behind(tmp_path):
    """SIGKILL of the fork server mid-candidate: that candidate is a ``crashed`` row, its child and what it
    started are gone, the run goes on with a new server. SIGKILL of the parent: the server sees EOF on its
    stdin and kills everything it started."""
    bundle = make_bundle(tmp_path / "b")
    out = tmp_path / "rows.jsonl"
    cmd = [PY, "-m", "axon_eg.measure", str(bundle), "--out", str(out), "--cpu"]
    env = {**os.environ, "AXON_EG_FORCE_CPU": "1", "AXON_TEST_SLOW": "1"}
    proc, tree = run_until_slow(cmd, env)
    (server,) = [p for p in tree if processes()[p][0] == proc.pid]
    os.kill(server, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    rows = {r["id"]: r for r in read_rows(out)}
    assert list(rows) == IDS and rows["after"]["status"] == "ok"
    assert rows["slow"]["status"] == "crashed" and "fork server exited" in rows["slow"]["error"]
    assert not [(p, cmdline(p)) for p, s in tree.items() if alive(p, s)]

    out.unlink()
    proc, tree = run_until_slow(cmd, env)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(p, s) for p, s in tree.items()):
        time.sleep(0.05)
    assert not [(p, cmdline(p)) for p, s in tree.items() if alive(p, s)]


def test_several_bundles_each_into_its_own_rows_file(tmp_path, capsys):
    from axon_eg.measure.cli import main

    first, second = make_bundle(tmp_path / "a"), make_bundle(tmp_path / "b")
    assert main([str(first), str(second), "--out", str(tmp_path / "rows.jsonl")]) == 2
    assert "--out names one file" in capsys.readouterr().err
    assert main([str(first), str(tmp_path / "nothing"), "--cpu"]) == 2  # checked before any work
    assert "not a bundle" in capsys.readouterr().err and not (first / "rows.jsonl").exists()
    assert main([str(first), str(second), "--cpu"]) == 0
    for bundle in (first, second):
        assert [r["id"] for r in read_rows(bundle / "rows.jsonl")] == IDS


def test_a_warm_up_compiles_every_candidate_untimed_and_writes_no_row(tmp_path):
    """``worker.warm``: each candidate not measured yet runs once in a child of its own, several at once, and
    leaves no row; the timed run that follows measures every one as before, and a bundle measured already
    is not warmed again."""
    from axon_eg.measure.worker import warm

    bundle = make_bundle(tmp_path / "b")
    counted = GOOD.replace("def kernel(x, y, out):\n", "def kernel(x, y, out):\n    import pathlib\n"
                           "    (pathlib.Path(__file__).parent / (pathlib.Path(__file__).stem + '.calls')).touch()\n")
    for cid in IDS:
        (bundle / f"{cid}.py").write_text(counted)
    assert warm([bundle], 2, gpus=[None, None]) == len(IDS)
    assert sorted(p.stem for p in bundle.glob("*.calls")) == sorted(IDS)  # each compiled and called
    assert not (bundle / "rows.jsonl").exists()
    rows = run_bundle(bundle, bundle / "rows.jsonl", gpus=[])
    assert [r["id"] for r in rows] == IDS and {r["status"] for r in rows} == {"ok"}
    assert all(r.get("stage") != "warm" for r in rows)
    assert warm([bundle], 2, gpus=[None, None]) == 0  # every candidate has its row: nothing to warm
    assert warm([bundle], 1, gpus=[None]) == 0 and warm([bundle], 4, gpus=[]) == 0
