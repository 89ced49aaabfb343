"""Phase 2 for NKI candidates (``axon_eg.backends.nki.measure``): with the real Neuron toolchain the kernels are
compiled and timed on the NeuronCore and rows say ``measured``; without it they run in the simulator and rows
say ``simulated``. The toolchain path is proven here with a stand-in ``nki`` module in ``sys.modules`` (its
``baremetal`` runs the kernel in the simulator, its ``benchmark`` reports a fixed latency); the test on a
real NeuronCore is skipped, with the reason, where the packages are absent."""

from __future__ import annotations

import sys
import types
from typing import Any

import polars as pl
import pytest
from benchmarks import suite

from axon_eg import pipeline
from axon_eg.backends.nki.emit import emit
from axon_eg.backends.nki.measure import device_module, measure_kernels, toolchain
from axon_eg.backends.nki.simulator import simulate
from axon_eg.hw import load
from axon_eg.testing.kernels import candidate_for

LATENCY_US = 12.5


def fake_nki(target: str, calls: dict[str, int]) -> types.ModuleType:
    """A stand-in for the real ``nki`` package: the calls the toolchain path makes, backed by the simulator."""

    def baremetal(fn: Any = None, **_: Any) -> Any:
        calls["baremetal"] = calls.get("baremetal", 0) + 1
        return lambda *xs: simulate(fn, *xs, target=target)

    def benchmark(fn: Any = None, warmup: int = 5, iters: int = 10, **_: Any) -> Any:
        def wrap(kernel: Any) -> Any:
            def run(*xs: Any) -> Any:
                calls["benchmark"] = calls.get("benchmark", 0) + 1
                run.benchmark_result = types.SimpleNamespace(nc_latency=types.SimpleNamespace(
                    get_latency_percentile=lambda p: LATENCY_US))
                return simulate(kernel, *xs, target=target)
            return run
        return wrap if fn is None else wrap(fn)

    module = types.ModuleType("nki")
    module.__dict__.update(jit=lambda f=None, **kw: f, baremetal=baremetal, benchmark=benchmark,
                           language=types.ModuleType("nki.language"), isa=types.ModuleType("nki.isa"))
    return module


@pytest.fixture
def with_fake_nki(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    calls: dict[str, int] = {}
    module = fake_nki("trn2", calls)
    for name, mod in (("nki", module), ("nki.language", module.language), ("nki.isa", module.isa)):
        monkeypatch.setitem(sys.modules, name, mod)
    return calls


def test_without_the_toolchain_rows_say_simulated():
    assert device_module(load("trn2")) is None and device_module(load("trn1")) is None
    program = suite.get("softmax").bound(small=True)
    kernel = emit(candidate_for(program, "trn2"), load("trn2"), "softmax")
    (row,) = measure_kernels(program, [kernel], load("trn2"), trials=1)
    assert row["device"] == "simulated (trn2)" and row["status"] == "ok"


def test_with_the_toolchain_kernels_are_compiled_and_timed_on_the_device(with_fake_nki):
    spec = load("trn2")
    assert device_module(spec) is sys.modules["nki"]
    assert device_module(load("trn1")) is None  # trn1 runs the legacy neuronxcc.nki, not installed
    program = suite.get("rmsnorm").bound(small=True)
    kernel = emit(candidate_for(program, "trn2"), spec, "rmsnorm")
    broken = kernel.__class__(**{**kernel.__dict__, "name": "broken", "source": kernel.source.replace("nl.rsqrt", "nl.sqrt")})
    ok, bad = measure_kernels(program, [kernel, broken], spec, trials=2)
    assert ok["device"] == "measured (trn2)" and ok["status"] == "ok" and ok["median_us"] == LATENCY_US
    assert ok["trials"] == 2 and bad["status"] == "wrong_result"
    assert with_fake_nki["baremetal"] == 2 and with_fake_nki["benchmark"] == 1


def test_the_pipeline_takes_the_toolchain_path(with_fake_nki, tmp_path):
    result = pipeline.saturate_and_extract(suite.get("silu").bound(small=True), target="nki", hw="trn2", k=2,
                                           cache_dir=tmp_path, saturation_s=0.2)
    t = result.table
    assert set(t["device"].drop_nulls()) == {"measured (trn2)"}
    assert t.filter(pl.col("status") == "ok").height >= 1 and set(t["median_us"].drop_nulls()) == {LATENCY_US}
    assert "NeuronCore" in result.summary() and with_fake_nki["benchmark"] >= 1


def test_real_neuron_toolchain_on_a_neuroncore():
    found = toolchain()
    if found is None:
        pytest.skip("the Neuron toolchain (nki / neuronx-cc) is not installed here: it comes only from AWS's own "
                    "package repository; NKI candidates are checked in the NumPy simulator instead")
    spec = load("trn2" if found.startswith("nki") else "trn1")
    program = suite.get("softmax").bound(small=True)
    kernel = emit(candidate_for(program, spec.name), spec, "softmax")
    (row,) = measure_kernels(program, [kernel], spec, trials=1)
    assert row["device"] == f"measured ({spec.name})" and row["status"] == "ok" and row["median_us"] > 0
