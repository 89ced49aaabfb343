"""The documented NKI API (``axon_eg.backends.nki.api``, issue 23): every kernel the emitter writes for the suite
uses only documented names, with documented parameters, in its dialect (trn2: ``nki``, trn1: ``neuronxcc``);
the check catches what it must; the coverage table in ``docs/nki_api.md`` is the simulator's; access patterns
(``.ap``) read what the NKI documentation says they read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from benchmarks import suite
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_nki_emit import EMITTED  # the suite programs the emitter covers

from axon_eg.backends.nki import api
from axon_eg.backends.nki.emit import emit
from axon_eg.backends.nki.isa import NkiSimulationError
from axon_eg.backends.nki.simulator import simulate
from axon_eg.hw import load
from axon_eg.testing.kernels import candidate_for

DIALECT = {"trn2": "current", "trn1": "legacy"}
DOC = Path(__file__).resolve().parents[2] / "docs" / "nki_api.md"


@pytest.mark.parametrize("target", sorted(DIALECT))
@pytest.mark.parametrize("name", EMITTED)
def test_every_emitted_suite_kernel_calls_only_documented_api(name, target):
    kernel = emit(candidate_for(suite.get(name).bound(small=True), target, -1, None, ()), load(target), "k")
    uses = list(api.uses(kernel.source, DIALECT[target]))
    assert uses  # the walk sees the kernel's NKI calls
    assert api.check_calls(kernel.source, DIALECT[target]) == []


@pytest.mark.parametrize("line, why", [
    ("x = nl.arange(128)", "nki.language.arange is not documented in the nki dialect"),
    ("nisa.nc_matmul(dst=p, stationary=a, moving=b, acumulate=True)", "keyword acumulate is not a documented parameter"),
    ("nisa.tensor_copy(d, s, nisa.vector_engine, 'n', 5)", "5 positional arguments"),
    ("nl.no_such_thing(x)", "nki.language.no_such_thing is not documented"),
])
def test_the_check_names_what_is_not_documented(line, why):
    source = f"import nki.language as nl\nimport nki.isa as nisa\n\n\ndef kernel(a, b, p, d, s):\n    {line}\n"
    problems = api.check_calls(source, "current")
    assert len(problems) == 1 and why in problems[0] and problems[0].startswith("line 6:"), problems


def test_the_same_call_is_judged_by_its_dialect():
    legacy = "import neuronxcc.nki.language as nl\n\ndef k(a):\n    return nl.arange(128)[:, None]\n"
    assert api.check_calls(legacy, "legacy") == []
    current = legacy.replace("neuronxcc.nki.language", "nki.language")
    assert api.check_calls(current, "current")


def test_the_coverage_table_in_the_docs_is_the_simulators():
    assert DOC.read_text().strip() == api.table_markdown().strip(), \
        "docs/nki_api.md is stale: python -m axon_eg.backends.nki.api > docs/nki_api.md"
    for dialect in ("current", "legacy"):
        cov = api.coverage(dialect)
        assert set(cov) == set(api.documented(dialect))
        assert {"nki.language.load", "nki.isa.nc_matmul", "nki.isa.activation"} <= {n for n, v in cov.items() if v == "supported"}


def test_an_unsupported_documented_api_raises_naming_it_and_the_kernel_line():
    unsupported = next(n for n, v in api.coverage("current").items() if v == "unsupported" and n.startswith("nki.isa."))
    short = unsupported.rsplit(".", 1)[1]
    source = f"import nki\nimport nki.isa as nisa\n\n\n@nki.jit\ndef k(a):\n    nisa.{short}(a)\n    return a\n"
    with pytest.raises(NotImplementedError, match=short) as info:
        simulate(source, np.ones((4, 4), np.float32), target="trn2")
    assert any("line 7" in n for n in getattr(info.value, "__notes__", [])), info.value


AP_KERNEL = """import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def k(x):
    out = nl.ndarray(({rows}, {cols}), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(({rows}, {cols}), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap({pattern}, offset={offset}))
    nisa.dma_copy(dst=out, src=t)
    return out
"""


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_an_access_pattern_reads_offset_plus_the_steps_of_the_flattened_tensor(data):
    size = data.draw(st.integers(1, 300), label="elements")
    rows, cols = data.draw(st.integers(1, 8), label="rows"), data.draw(st.integers(1, 9), label="cols")
    steps = (data.draw(st.integers(0, 7), label="partition step"), data.draw(st.integers(0, 3), label="free step"))
    reach = steps[0] * (rows - 1) + steps[1] * (cols - 1)
    offset = data.draw(st.integers(0, max(0, size - 1 - reach)), label="offset")
    x = np.random.default_rng(size).uniform(0.5, 2.0, size).astype(np.float32)
    source = AP_KERNEL.format(rows=rows, cols=cols, pattern=[[steps[0], rows], [steps[1], cols]], offset=offset)
    if offset + reach >= size:
        with pytest.raises(NkiSimulationError, match="reaches elements"):
            simulate(source, x, target="trn2")
        return
    got = simulate(source, x, target="trn2")
    want = x[offset + steps[0] * np.arange(rows)[:, None] + steps[1] * np.arange(cols)[None, :]]
    np.testing.assert_array_equal(got, want)


def test_an_on_chip_access_pattern_walks_whole_partitions_and_only_on_an_ndarray():
    source = AP_KERNEL.replace("src=x.ap({pattern}, offset={offset})", "src=x")
    source = source.replace("nisa.dma_copy(dst=out, src=t)", "nisa.dma_copy(dst=out, src=t.ap({pattern}, offset=0))")
    x = np.ones((4, 6), np.float32)
    assert simulate(source.format(rows=4, cols=6, pattern=[[6, 4], [1, 6]], offset=0), x, target="trn2").shape == (4, 6)
    with pytest.raises(NkiSimulationError, match="step must be 6"):  # every other partition: the docs' illegal case
        simulate(source.format(rows=2, cols=6, pattern=[[12, 2], [1, 6]], offset=0).replace("(2, 6), dtype=x.dtype, "
                 "buffer=nl.sbuf", "(4, 6), dtype=x.dtype, buffer=nl.sbuf"), x, target="trn2")
    nested = AP_KERNEL.format(rows=2, cols=3, pattern=[[3, 2], [1, 3]], offset=0).replace("x.ap(", "x[0:2, 0:3].ap(")
    with pytest.raises(NkiSimulationError, match="only allowed on an nl.ndarray"):
        simulate(nested, np.ones((4, 6), np.float32), target="trn2")
