"""Xe-Forge's spec form (issue 52): inputs by name over symbolic dims, ``inits`` onto the reference's constructor by
name, size-set sections chosen by ``--sizes``, ``flop`` formulas; every bad key refused in one line naming it."""

from __future__ import annotations

import keyword
import math

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from axon_eg.cli import _triton_sizes_type
from axon_eg.triton_in import xeforge
from axon_eg.triton_in.source import TritonInputError
from axon_eg.triton_in.spec import harness, read_spec

SYMBOLS = st.from_regex(r"[A-Z][A-Z0-9_]{0,6}", fullmatch=True).filter(lambda s: not keyword.iskeyword(s))


@st.composite
def specs(draw):
    """(an Xe-Forge spec's data, for each size set: the shapes and flop it must resolve to)."""
    symbols = draw(st.lists(SYMBOLS, min_size=1, max_size=4, unique=True))
    names = draw(st.lists(st.from_regex(r"[a-z][a-z0-9]{0,4}", fullmatch=True).filter(lambda s: not keyword.iskeyword(s)),
                          min_size=1, max_size=3, unique=True))
    inputs = {}
    for n in names:
        shape = draw(st.lists(st.one_of(st.sampled_from(symbols), st.integers(1, 9)), min_size=1, max_size=3))
        inputs[n] = {"shape": shape, "dtype": draw(st.sampled_from(["float16", "bfloat16", "float32", "fp32"]))}
    data = {"inputs": inputs, "inits": [{"dim": s} for s in symbols]}
    expected = []
    for section in draw(st.lists(st.sampled_from(["ci", "bench-gpu", "nightly"]), min_size=1, max_size=2, unique=True)):
        sets = []
        for _ in range(draw(st.integers(1, 3))):
            dims = {s: draw(st.sampled_from([1, 3, 7, 16, 33, 128])) for s in symbols}
            params = draw(st.permutations(names))
            entry = {"params": list(params), "dims": dims, "flop": "2*" + "*".join(symbols)}
            if draw(st.booleans()):
                entry["dtype"] = "float16"
            sets.append(entry)
            resolved = [[dims[d] if isinstance(d, str) else d for d in inputs[p]["shape"]] for p in params]
            expected.append((section, len(sets) - 1, resolved, 2 * math.prod(dims.values()), list(dims.values())))
        data[section] = sets
    return data, expected


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs())
def test_every_size_set_resolves_its_shapes_flop_and_init(case):
    data, expected = case
    checked, _ = read_spec(data)
    spec = checked["xeforge"]
    assert spec is not None and checked["inputs"] is None
    for section, i, shapes, flop, init in expected:
        chosen, _ = xeforge.select(spec, f"{section}[{i}]", small=False)
        assert [s["shape"] for s in xeforge.shapes(spec, chosen)] == shapes
        assert xeforge.flop_value(chosen.flop, chosen.dims) == flop
        assert xeforge.init_args(spec, chosen, type("Model", (), {"__init__": lambda self, *a: None})) == init
    small, _ = xeforge.select(spec, None, small=True)
    large, _ = xeforge.select(spec, None, small=False)
    assert xeforge.input_bytes(spec, small) == min(xeforge.input_bytes(spec, s) for s in spec.sets)
    assert xeforge.input_bytes(spec, large) == max(xeforge.input_bytes(spec, s) for s in spec.sets)


GOOD = {"inputs": {"X": {"shape": ["BATCH", "IN_FEAT"], "dtype": "float16"}},
        "inits": [{"dim": "IN_FEAT"}, {"dim": "OUT_FEAT"}],
        "ci": [{"params": ["X"], "dtype": "float16", "dims": {"BATCH": 8, "IN_FEAT": 16, "OUT_FEAT": 24},
                "flop": "2*BATCH*IN_FEAT*OUT_FEAT", "name": "tiny"}],
        "bench-gpu": [{"params": ["X"], "dims": {"BATCH": 4096, "IN_FEAT": 1024, "OUT_FEAT": 2048},
                       "flop": "2*BATCH*IN_FEAT*OUT_FEAT"}]}


def _with(path: str, value) -> dict:
    """GOOD with the value at ``path`` (dotted; ``[i]`` list items) replaced (None: deleted)."""
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    *head, last = path.split(".")
    node = data
    for part in head:
        node = node[int(part)] if part.isdigit() else node[part]
    key = int(last) if last.isdigit() else last
    if value is None:
        del node[key]
    else:
        node[key] = value
    return data


@pytest.mark.parametrize("data, message", [
    (_with("init", [1]), "unknown key 'init' (did you mean 'inits'?"),
    (_with("ci.0.dims.BATCH", 0), "ci[0].dims.BATCH: must be an int >= 1, got 0"),
    (_with("ci.0.params", ["Y"]), "ci[0].params: 'Y' is not an input"),
    (_with("ci.0.dims.OUT_FEAT", None), "ci[0].dims: no value for 'OUT_FEAT', which inits names"),
    (_with("bench-gpu.0.dims.IN_FEAT", None), "bench-gpu[0].dims: no value for 'IN_FEAT', which an input shape names"),
    (_with("inputs.X.dtype", "float17"), "inputs.X.dtype: unknown dtype 'float17'"),
    (_with("inputs.X.shape", ["BATCH", 0]), "inputs.X.shape: must be a list of ints >= 1 and dim names"),
    (_with("ci.0.flop", "2*BATCH*K"), "ci[0].flop: '2*BATCH*K' names 'K', which is not one of the set's dims"),
    (_with("ci.0.flop", "__import__('os').getpid()"), "only numbers, dim names and"),
    (_with("ci.0.flop", "BATCH-BATCH"), "is 0 at these dims"),
    (_with("ci.0.flops", 3), "unknown key 'ci[0].flops' (did you mean 'ci[0].flop'?"),
    (_with("inits.0", {"dims": "IN_FEAT"}), "unknown key 'inits[0].dims' (did you mean 'inits[0].dim'?"),
    (_with("ci", {"dims": {}}), "unknown key 'ci'"),
])
def test_a_bad_spec_is_refused_in_one_line_naming_the_key(data, message):
    with pytest.raises(TritonInputError) as err:
        read_spec(data)
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_sizes_names_a_section_an_index_or_a_set_and_a_wrong_one_is_named():
    spec = read_spec(GOOD)[0]["xeforge"]
    assert xeforge.select(spec, "ci", small=False)[0].dims["BATCH"] == 8
    assert xeforge.select(spec, "tiny", small=False)[0].name == "tiny"
    assert xeforge.select(spec, "bench-gpu[0]", small=True)[0].dims["BATCH"] == 4096
    assert xeforge.select(spec, None, small=True)[0].section == "ci"
    assert xeforge.select(spec, None, small=False)[0].section == "bench-gpu"
    with pytest.raises(TritonInputError, match=r"--sizes 'bench' is no size set \(did you mean 'bench-gpu'\?"):
        xeforge.select(spec, "bench", small=False)
    with pytest.raises(TritonInputError, match=r"ci has 1 size set\(s\) \(0 .. 0\)"):
        xeforge.select(spec, "ci[3]", small=False)
    assert _triton_sizes_type("bench-gpu") == "bench-gpu" and _triton_sizes_type("ROWS=4") == {"ROWS": 4}


REFERENCE = """
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, out_feat, in_feat, scale=2.0):
        super().__init__()
        self.lin = nn.Linear(in_feat, out_feat)
        self.scale = scale

    def forward(self, x):
        return self.lin(x) * self.scale
"""


def test_the_harness_maps_inits_onto_the_constructor_by_name_and_reports_the_flop(tmp_path):
    ref = tmp_path / "ref.py"
    ref.write_text(REFERENCE)
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(GOOD))
    call = harness(ref, spec_path, small=True)
    assert call.init == [24, 16]  # Model(out_feat, in_feat): by name, not in the inits' order
    assert call.inputs == [{"name": "x0", "shape": [8, 16], "dtype": "fp16"}]
    assert call.outputs == [([8, 24], 4)] and call.flop == 2 * 8 * 16 * 24
    assert "ci[0] (tiny)" in call.note and "smallest" in call.note
    big = harness(ref, spec_path, small=False)
    assert big.init == [2048, 1024] and big.inputs[0]["shape"] == [4096, 1024]
    clash = _with("inits", [{"dim": "OUT_FEAT"}, {"dim": "out_feat"}])
    clash["ci"][0]["dims"]["out_feat"] = 3
    clash["bench-gpu"][0]["dims"]["out_feat"] = 3
    with pytest.raises(TritonInputError, match="inits\\[0\\] and inits\\[1\\] both name Model's parameter 'out_feat'"):
        harness(ref, clash, small=True)
    scaled = _with("inits", [{"dim": "IN_FEAT"}, {"dim": "OUT_FEAT"}, {"value": 3.0}])
    assert harness(ref, scaled, small=True).init == [24, 16, 3.0]  # the rest in order: scale=3.0
    extra = _with("inits", [{"dim": "IN_FEAT"}, {"dim": "OUT_FEAT"}, {"value": 3.0}, {"value": 4}])
    with pytest.raises(TritonInputError, match="inits\\[3\\] has no parameter of Model.__init__ to go to"):
        harness(ref, extra, small=True)


def test_the_cli_names_a_size_set_that_is_not_there_and_a_set_without_an_xeforge_spec(tmp_path, capsys):
    from pathlib import Path

    from axon_eg import cli

    inputs = Path(__file__).resolve().parent.parent / "benchmarks" / "triton_inputs"
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"inputs": {"X": {"shape": ["ROWS", "COLS"], "dtype": "float32"}},
                                    "inits": [{"dim": "COLS"}], "ci": [{"dims": {"ROWS": 5, "COLS": 129}}]}))
    base = ["optimize-triton", str(inputs / "bias_gelu_t2t.py"), "--reference", str(inputs / "bias_gelu_ref.py"),
            "--cpu", "--out", str(tmp_path / "o")]
    for extra, message in [(["--spec", str(spec), "--sizes", "cj"], "--sizes 'cj' is no size set (did you mean 'ci'?"),
                           (["--sizes", "ci"], "--sizes 'ci': a size set is an Xe-Forge spec's (--spec YAML)")]:
        assert cli.main(base + extra) == 2
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("axon-eg: error:")]
        assert len(err) == 1 and message in err[0], err


def test_full_takes_the_largest_size_set_that_fits(tmp_path):
    """``--full`` without ``--sizes``: the largest set the run's limits let through (here: a check refusing any set
    of more than 10,000 input elements), the note saying which did not fit."""
    from pathlib import Path

    from axon_eg.errors import InvalidArgument
    from axon_eg.triton_in import run

    inputs = Path(__file__).resolve().parent.parent / "benchmarks" / "triton_inputs"
    spec = {"inputs": {"X": {"shape": ["ROWS", "COLS"], "dtype": "float32"}}, "inits": [{"dim": "COLS"}],
            "ci": [{"dims": {"ROWS": 5, "COLS": 129}}, {"dims": {"ROWS": 64, "COLS": 129}}],
            "bench-gpu": [{"dims": {"ROWS": 8192, "COLS": 8192}}]}
    seen = []

    def check(call):
        seen.append(call.inputs[0]["shape"])
        if math.prod(call.inputs[0]["shape"]) > 10_000:
            raise InvalidArgument("too large here")

    class Stop(Exception):
        pass

    def stop(call):
        check(call)
        assert call.inputs[0]["shape"] == [64, 129] and "fits here" in call.note and "bench-gpu[0]" in call.note
        raise Stop

    with pytest.raises(Stop):
        run.prepare(inputs / "bias_gelu_t2t.py", reference=inputs / "bias_gelu_ref.py", spec=spec, out=tmp_path / "o",
                    device="cpu", small=False, check=stop)
    assert seen == [[8192, 8192], [64, 129]]
