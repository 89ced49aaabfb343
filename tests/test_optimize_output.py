"""``axon-eg optimize`` output (issue 15, items 7 and 8): plain progress lines when stdout is not a terminal,
the rich table that fits the terminal, the line on why the selected row won, ``--sizes``, the plain last line
and ``--require-candidate`` exit status when a baseline wins, and ``--out`` written when nothing ran correctly.

Most runs fake the measuring worker (``run_bundle``) so that only phase 1 runs for real."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from rich.console import Console

from axon_eg.cli import main
from axon_eg.cli import optimize as optimize_cli
from axon_eg.errors import InvalidArgument
from axon_eg.measure import report

os.environ["AXON_EG_FORCE_CPU"] = "1"
ROOT = Path(__file__).resolve().parents[1]
KB = ROOT / "benchmarks" / "problems" / "05_Matmul_Divide_Sum_Scaling.py"


def fake_worker(monkeypatch, status_of):
    """Replace the measuring worker: each id gets the row ``status_of(id)`` says (no child, no Triton)."""

    def run_bundle(bdir, out, gpus=None, ids=None, **kw):
        rows = []
        for cid in ids:
            status = status_of(cid)
            rows.append({"id": cid, "status": status, "stage": "done" if status == "ok" else "run",
                         "error": None if status == "ok" else f"Traceback (most recent call last):\n  ...\n{status}: boom",
                         "max_abs_err": 0.0 if status == "ok" else None, "device": "cpu",
                         "timestamp": "2000-01-01T00:00:00+00:00"})
        return rows

    monkeypatch.setattr("axon_eg.measure.worker.run_bundle", run_bundle)


def optimize(tmp_path, *extra):
    return main(["optimize", "rmsnorm", "-k", "2", "--cpu", "--cache", str(tmp_path / "cache"),
                 "--out", str(tmp_path / "out"), *extra])


# -- the CLI, through main() (capsys: stdout is not a terminal) ------------------------------------
def test_not_a_terminal_prints_progress_lines_a_fitting_table_and_the_tie_rule(tmp_path, capsys, monkeypatch):
    fake_worker(monkeypatch, lambda cid: "ok")
    assert optimize(tmp_path) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "[0.0 s] load: rmsnorm"
    assert lines[1] == "sizes: using M=5, N=7 (the suite's small sizes (--full for the H200 sizes))"
    progress = [ln for ln in lines if ln.startswith("[")]
    for phase in optimize_cli.PHASES:
        assert any(f"] {phase} " in ln for ln in progress), phase
    assert any("saturate 1/1 done" in ln and "e-nodes" in ln for ln in progress)
    assert "|---" not in out and "| id |" not in out  # no Markdown on the terminal
    header = next(ln for ln in lines if ln.startswith("id "))
    assert "verdict" in header and "pred_us" in header
    for empty in ("median_us", "iqr_us", "x_eager", "x_compile", "error"):  # no values on the CPU
        assert empty not in header
    assert all(len(ln) <= 80 for ln in lines if not ln.startswith(("[", "sizes", "best", "correctness")))
    tie = next(ln for ln in lines if ln.startswith("correctness only: "))
    assert "selected by the lowest predicted cost" in tie and "among 2 correct candidates" in tie
    assert lines[-1].startswith("best kernel: ")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| id | kind | verdict |" in md and "median_us" in md and "lowest predicted cost" in md


def test_a_baseline_win_says_so_last_and_require_candidate_exits_3(tmp_path, capsys, monkeypatch):
    fake_worker(monkeypatch, lambda cid: "ok" if cid == "torch_eager" else "timeout")
    assert optimize(tmp_path) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == ("best: torch_eager (a baseline): no candidate ran correctly — 2 of 2 candidates failed: "
                    "2 timeout")
    assert optimize(tmp_path, "--require-candidate") == optimize_cli.EXIT_BASELINE
    out = capsys.readouterr().out
    assert out.splitlines()[-1].startswith("best: torch_eager (a baseline)")
    assert "exit status 3: --require-candidate" in out.splitlines()[-1]
    assert "none of the 2 candidates ran correctly" in out
    assert "timeout: boom" in out, out  # the traceback's last line, in the error column


def test_nothing_correct_still_writes_the_table_and_report(tmp_path, capsys, monkeypatch):
    fake_worker(monkeypatch, lambda cid: "wrong_result" if cid.startswith("c") else "crashed")
    assert optimize(tmp_path) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("axon-eg: error: ") and "report.md" in err[0]
    table = pl.read_parquet(tmp_path / "out" / "table.parquet")
    assert set(table["status"]) == {"wrong_result", "crashed"} and table.height == 3
    md = (tmp_path / "out" / "report.md").read_text()
    assert "2 of 2 candidates failed (2 wrong_result)" in md and "| torch_eager |" in md
    assert "wrong_result" in captured.out  # the table of what was measured is shown too


@pytest.mark.parametrize("sizes, message", [
    ("M=x", "--sizes 'M=x': M must be an integer >= 1, got 'x'"),
    ("M", "--sizes 'M': 'M' is not NAME=INT"),
    ("M=0", "M must be an integer >= 1, got '0'"),
    ("M=4,,N=2", "expected NAME=INT"),
    ("M=4,M=2", "M is given twice"),
    ("Q=4", "--sizes 'Q=4': rmsnorm: no dim named 'Q'; dims are ['M', 'N']"),
])
def test_sizes_errors_are_one_line_naming_the_option(sizes, message, capsys):
    assert main(["optimize", "rmsnorm", "--cpu", "--sizes", sizes]) == 2
    captured = capsys.readouterr()
    assert "saturate" not in captured.out and len(captured.err.splitlines()) == 1
    assert captured.err.startswith("axon-eg: error: --sizes ") and message in captured.err


@pytest.mark.parametrize("argv, message", [(["-k", "0"], "-k must be an integer >= 1, got 0"),
                                           (["--budget", "-1"], "--budget must be a number of seconds > 0")])
def test_bad_options_are_one_line_naming_them(argv, message, capsys):
    assert main(["optimize", "rmsnorm", "--cpu", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == f"axon-eg: error: {message}" + captured.err.split(message, 1)[1]
    assert len(captured.err.splitlines()) == 1


def test_a_pipeline_error_carrying_its_table_is_written_to_out(tmp_path, capsys, monkeypatch):
    from axon_eg import pipeline

    def fails(*a, **k):
        err = pipeline.PipelineError("rmsnorm: no candidate and no baseline ran correctly")
        err.table = GPU.drop("verdict").with_columns(status=pl.lit("crashed"))
        raise err

    monkeypatch.setattr(pipeline, "saturate_and_extract", fails)
    assert optimize(tmp_path) == 2
    err = capsys.readouterr().err
    assert err.startswith("axon-eg: error: rmsnorm: no candidate and no baseline ran correctly; what was measured: ")
    assert pl.read_parquet(tmp_path / "out" / "table.parquet")["verdict"].to_list() == ["crashed"] * GPU.height
    assert "4 of 4 candidates failed (4 crashed)" in (tmp_path / "out" / "report.md").read_text()


def test_sizes_bind_a_suite_program():
    program, line = optimize_cli._load(_args("rmsnorm", sizes="N=9"), {"N": 9})
    assert program.bindings == {"M": 5, "N": 9}
    assert line == "sizes: using M=5, N=9 (N=9 as given, the rest the suite's small sizes (--full for the H200 sizes))"


def _args(target, *, cpu=True, full=False, sizes=None):
    import argparse

    return argparse.Namespace(target=target, cpu=cpu, full=full, sizes=sizes)


def test_cpu_on_a_kernelbench_file_uses_its_small_sizes_and_says_so():
    program, line = optimize_cli._load(_args(str(KB)), None)
    assert [list(program.concrete_shape(n)) for n in program.input_ids][0] == [8, 32]
    assert line == ("--cpu without --full: using the file's small sizes batch_size=8, input_size=32, hidden_size=24 "
                    "(SMALL_SIZES; --full for its own sizes)")
    program, line = optimize_cli._load(_args(str(KB), sizes="batch_size=3"), {"batch_size": 3})
    assert [list(program.concrete_shape(n)) for n in program.input_ids][0] == [3, 32]
    assert line == ("--cpu without --full: using batch_size=3 as given over the file's small sizes batch_size=8, "
                    "input_size=32, hidden_size=24 (SMALL_SIZES; --full for its own sizes)")
    with pytest.raises(InvalidArgument, match=r"--sizes 'height=3': 05_Matmul.* no module-level 'height'"):
        optimize_cli._load(_args(str(KB), sizes="height=3"), {"height": 3})


def test_help_documents_require_candidate_and_exit_status(capsys):
    with pytest.raises(SystemExit):
        main(["optimize", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--require-candidate" in text and "exit with status 3" in text and "--sizes" in text
    assert "3 with ``--require-candidate``" in " ".join(optimize_cli.__doc__.split())


# -- the pieces, on made-up tables ----------------------------------------------------------------
def table(rows):
    cols = ("id", "kind", "verdict", "status", "rank", "predicted_us", "median_us", "iqr_us", "speedup_vs_eager",
            "speedup_vs_compile", "max_abs_err", "lowering", "plan", "error")
    return pl.DataFrame([{c: r.get(c) for c in cols} for r in rows],
                        schema={c: (pl.Float64 if c.endswith(("_us", "_err")) or c.startswith("speedup") else
                                    pl.Int64 if c == "rank" else pl.Utf8) for c in cols})


GPU = table([
    {"id": "torch_eager", "kind": "baseline", "verdict": "slower", "status": "ok", "median_us": 9.2},
    {"id": "torch_compile", "kind": "baseline", "verdict": "slower", "status": "ok", "median_us": 8.0},
    {"id": "c00", "kind": "candidate", "rank": 0, "verdict": "slower", "status": "ok", "predicted_us": 5.0,
     "median_us": 6.60},
    {"id": "c01", "kind": "candidate", "rank": 1, "verdict": "selected", "status": "ok", "predicted_us": 5.5,
     "median_us": 6.55},
    {"id": "c02", "kind": "candidate", "rank": 2, "verdict": "slower", "status": "ok", "predicted_us": 6.0,
     "median_us": 6.58},
    {"id": "c03", "kind": "candidate", "rank": 3, "verdict": "timeout", "status": "timeout",
     "error": "timed out after 120 s " + "x" * 200},
])


def test_gpu_tie_line_names_the_rule():
    line = report.selection_line(GPU, "c01", timed=True)
    assert line == ("c01 selected: fastest correct (6.55 us median, of 5 correct); c02 (6.58 us) and c00 (6.60 us) "
                    "within 1% — the lowest median wins, predicted cost breaks no ties")
    assert report.baseline_line(GPU, "c01") is None


def test_gpu_baseline_win_line():
    df = GPU.with_columns(median_us=pl.when(pl.col("id") == "torch_compile").then(5.0).otherwise(pl.col("median_us")))
    assert report.selection_line(df, "torch_compile", timed=True).startswith(
        "torch_compile (a baseline) selected: fastest correct (5.00 us median")
    assert report.baseline_line(df, "torch_compile") == (
        "best: torch_compile (a baseline): no correct candidate was faster (the fastest, c01, took 6.55 us against "
        "5.00 us) — 1 of 4 candidates failed: 1 timeout")


def test_cpu_lines_without_ties_and_with_one_correct_candidate():
    df = table([{"id": "torch_eager", "kind": "baseline", "status": "ok"},
                {"id": "c00", "kind": "candidate", "rank": 0, "status": "ok", "predicted_us": 3.0},
                {"id": "c01", "kind": "candidate", "rank": 1, "status": "ok", "predicted_us": 4.0},
                {"id": "c02", "kind": "candidate", "rank": 2, "status": "ok", "predicted_us": 3.01}])
    assert report.selection_line(df, "c00", timed=False) == (
        "correctness only: c00 selected by the lowest predicted cost (3.00 us) among 3 correct candidates; "
        "c02 is within 1% — the lowest prediction wins")
    one = df.filter(pl.col("id").is_in(["torch_eager", "c00"]))
    assert report.selection_line(one, "c00", timed=False) == "correctness only: c00 selected: the only correct candidate of 1"


@pytest.mark.parametrize("width", [80, 60, 200])
def test_terminal_table_fits_leaves_out_empty_columns_and_cuts_long_cells(width):
    console = Console(width=width, file=open(os.devnull, "w"), record=True)
    cols = [c for c in GPU.columns if c != "rank"]
    cpu = GPU.with_columns(median_us=None, speedup_vs_eager=None)
    console.print(report.terminal_table(cpu, cols, "c01", console.width))
    text = console.export_text()
    lines = text.splitlines()
    assert len(lines) == 2 + GPU.height  # one line per row, none wrapped
    assert all(len(ln) <= width for ln in lines)
    assert "median_us" not in lines[0] and "x_eager" not in lines[0] and "x_compile" not in lines[0]
    assert lines[0].split()[:4] == ["id", "kind", "verdict", "status"]
    assert any(ln.startswith("c01 ") for ln in lines) and any(ln.startswith("torch_compile ") for ln in lines)
    if width == 60:  # no room left for even MIN_LONG characters of the error: the column is given up
        assert "error" not in lines[0] and "timed out" not in text
    else:
        assert "error" in lines[0] and "timed out after 120 s x" in text and "…" in text  # cut, not wrapped


def test_markdown_table_keeps_every_cell_whole():
    md = report.markdown_table(GPU.select("id", "error"))
    assert "x" * 200 in md and md.count("\n") == GPU.height + 1


def test_plain_progress_is_throttled_per_phase_but_keeps_starts_and_ends(monkeypatch):
    import io

    clock = [0.0]
    monkeypatch.setattr(optimize_cli.time, "monotonic", lambda: clock[0])
    buf = io.StringIO()
    p = optimize_cli.PlainProgress(buf, 0.0, every=2.0)
    for i in range(10):  # one call every 0.5 s
        p("measure", i, 10, f"c{i:02d}")
        clock[0] += 0.5
    p("measure", 10, 10, "")
    got = buf.getvalue().splitlines()
    assert got == ["[0.0 s] measure 1/10 c00", "[2.0 s] measure 5/10 c04", "[4.0 s] measure 9/10 c08",
                   "[5.0 s] measure 10/10 done (5.0 s)"]


# -- a real run, in a child with its stdout a pipe: lines arrive while it runs --------------------
@pytest.mark.slow  # an end-to-end CLI run (make test's 5 minutes; CI runs it in make test-slow)
def test_progress_lines_arrive_before_the_end(tmp_path):
    env = {**os.environ, "TRITON_INTERPRET": "1", "AXON_EG_FORCE_CPU": "1", "COLUMNS": "80"}
    cmd = [sys.executable, "-m", "axon_eg.cli", "optimize", "rmsnorm", "-k", "2", "--cpu", "--cache",
           str(tmp_path / "cache"), "--out", str(tmp_path / "out")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        early = [proc.stdout.readline() for _ in range(4)]  # load, sizes, saturate start, saturate end
        running = proc.poll() is None
        rest, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert running, "the first lines came only when the run had ended"
    assert early[0].startswith("[") and "load: rmsnorm" in early[0] and "saturate 1/1 done" in early[3]
    assert "|---" not in rest and "correctness only: " in rest
