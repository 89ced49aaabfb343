"""The repository is self-contained: no file of it points at a path outside it.

Design notes, hardware figures and their sources live in the repository (``ARCHITECTURE.md``,
``data/hw_costs/*.yaml``); a pointer to a team's notes beside the checkout, a home directory or a
machine's scratch space is dead on every other clone. Checked over the files git holds or would hold
(tracked, plus untracked files that are not ignored), text files only; a failure names ``file:line``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()

# Absolute paths of machines (home directories, the team's workspace, mounts) and the names of notes that
# were kept outside the repository. Relative paths that climb out of the repository are checked separately.
# The names are assembled from pieces so that this file does not itself name a place outside the repository.
_SHARED, _HW_NOTES, _TECH_NOTES = "sha" + "red", "hw-" + "facts", "tech" + "niques"
OUTSIDE = [
    (re.compile(r"(?<![\w.~-])/(?:" + "|".join(("wo" + "rk", "home", "Users", "root", "mnt", "scratch")) + ")/"),
     "an absolute path outside the repository"),
    (re.compile(r"(?<![\w./-])" + _SHARED + "/"), "the team's folder beside the checkout"),
    (re.compile(r"\b" + _HW_NOTES + r"(?:\.md)?\b"), "the hardware notes outside the repository (cite the primary "
                                                    "source, or data/hw_costs/*.yaml where the number lives)"),
    (re.compile(r"\b" + _TECH_NOTES + r"\.md\b"), "the technique notes outside the repository"),
]
RELATIVE = re.compile(r"(?:\.\./)+[\w.\-/]*")


def repo_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, check=True).stdout
    return sorted({f for f in out.decode().split("\0") if f})


def text_of(path: Path) -> str | None:
    """The file's text, or None for a binary file (a NUL byte, or not UTF-8) or one that is gone."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        return None
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def outside_references(name: str, text: str) -> list[str]:
    found = []
    folder = (ROOT / name).parent
    for lineno, line in enumerate(text.splitlines(), 1):
        for pattern, what in OUTSIDE:
            for m in pattern.finditer(line):
                found.append(f"{name}:{lineno}: {m.group(0)!r}: {what}")
        for m in RELATIVE.finditer(line):
            target = (folder / m.group(0)).resolve()
            if not target.is_relative_to(ROOT):
                found.append(f"{name}:{lineno}: {m.group(0)!r}: a relative path that leaves the repository")
    return found


def test_no_file_refers_to_a_path_outside_the_repository():
    found = []
    for name in repo_files():
        if name == THIS:
            continue
        text = text_of(ROOT / name)
        if text is not None:
            found += outside_references(name, text)
    assert not found, "files that point outside the repository:\n" + "\n".join(found)


@pytest.mark.parametrize("line, bad", [
    ("See `" + "../" + _SHARED + "/ARCHITECTURE.md` for the design.", True),
    ('source: "' + _HW_NOTES + '.md: 132 SMs"', True),
    ("# Sources: notes = /" + "wo" + "rk/" + _SHARED + "/notes.md", True),
    ("measured in /home/someone/runs", True),
    ("see " + _TECH_NOTES + ".md", True),
    ('source: "NVIDIA H200 datasheet: 4.8 TB/s"', False),
    ("memory.shared.per_sm, tl." + _SHARED + "/registers, src/axon_eg/hw.py", False),
    ("cache under ~/.cache/axon_eg or $AXON_EG_CACHE", False),
])
def test_the_patterns(line, bad):
    assert bool(outside_references("README.md", line)) == bad, line


def test_relative_paths_inside_the_repository_pass():
    assert not outside_references("benchmarks/results/2026-12-01-issue14/README.md", "see ../../../README.md")
    assert outside_references("benchmarks/README.md", "see ../../elsewhere/notes.md")
