"""Hardware descriptions (data/hw_costs/*.yaml): the bundled files, unit conversion, and every kind of error."""

from __future__ import annotations

import copy
import pickle
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from axon_eg import hw
from axon_eg.errors import AxonError
from axon_eg.hw import HardwareKeyError, HardwareSpecError
from axon_eg.hw_schema import SCHEMA, Field

BUNDLED = {"h100": "gpu", "h200": "gpu", "intel-xe2": "gpu", "trn1": "trainium", "trn2": "trainium"}


def _doc(target: str) -> dict:
    return copy.deepcopy(yaml.safe_load((hw.DATA_DIR / f"{target}.yaml").read_text()))


def _write(folder: Path, doc: dict | str, name: str = "h200") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
    return path


def _leaf(doc: dict, key: str) -> dict:
    node = doc
    for part in key.split("."):
        node = node[part]
    return node


def _set_leaf(doc: dict, key: str, leaf: Any) -> None:
    *parents, last = key.split(".")
    node = doc
    for part in parents:
        node = node[part]
    node[last] = leaf


def _error(path: Path) -> HardwareSpecError:
    with pytest.raises(HardwareSpecError) as info:
        hw.load(path)
    assert str(path) in str(info.value), "the message names the file"
    return info.value


# ------------------------------------------------------------------------------------------ bundled files
def test_targets_lists_the_bundled_files():
    assert hw.targets() == sorted(BUNDLED)


@pytest.mark.parametrize("target", sorted(BUNDLED))
def test_bundled_file_loads_with_every_schema_key_and_a_source_each(target):
    spec = hw.load(target)
    assert (spec.name, spec.kind) == (target, BUNDLED[target])
    assert spec.path == hw.DATA_DIR / f"{target}.yaml"
    required = {k for k, f in SCHEMA[spec.kind].items() if f.required}
    assert required <= set(spec.keys()) <= set(SCHEMA[spec.kind])
    for key in spec.keys():
        source = spec.source(key)
        assert source.strip(), key
        assert any(w in source for w in ("derived", "estimate", "measured", "NVIDIA", "intel/", "AWS Neuron", "Triton")), \
            f"{target} {key}: source {source!r} names no document, measurement or derivation"


def test_bundled_values_in_base_units():
    h200, trn1, trn2 = hw.load("h200"), hw.load("trn1"), hw.load("trn2")
    assert h200.value("memory.shared.per_sm") == 228 * 1024
    assert h200.value("memory.shared.per_block") == 227 * 1024
    assert h200.value("memory.l2.capacity") == 60 * 2**20
    assert h200.value("memory.registers.per_sm") == 65536 * 4
    assert h200.value("memory.hbm.bandwidth") == 4.8e12
    assert h200.value("memory.hbm.measured_bandwidth") == 4.3e12
    assert h200.value("compute.measured_peak.bf16") == 790e12
    assert h200.value("compute.units") == 132 and isinstance(h200.value("compute.units"), int)
    assert h200.value("knobs.num_warps") == [2, 4, 8, 16]
    assert trn1.value("memory.sbuf.per_partition") == 192 * 1024
    assert trn2.value("memory.sbuf.per_partition") == 224 * 1024
    assert trn1.value("compute.engines.tensor.peak.bf16") == pytest.approx(128 * 128 * 2 * 2.8e9)
    assert trn1.value("compute.dma.bandwidth_per_engine") == 17e9
    assert trn1.value("costs.dma_fixed") == 1.3e-6
    assert (trn1.value("features.nki_dialect"), trn2.value("features.nki_dialect")) == ("legacy", "current")
    assert (trn1.value("features.dma_transpose"), trn2.value("features.dma_transpose")) == (False, True)
    assert hw.load("intel-xe2").value("knobs.grf_mode") == ["default", "128", "256", "512", "auto"]


def test_load_is_cached_and_rereads_an_edited_file(tmp_path):
    assert hw.load("h200") is hw.load("h200")
    assert hw.load("h200") is hw.load(hw.DATA_DIR / "h200.yaml")
    doc = _doc("h200")
    path = _write(tmp_path, doc)
    assert hw.load(path).value("compute.units") == 132
    _leaf(doc, "compute.units")["value"] = 66
    path.write_text(yaml.safe_dump(doc) + "# edited: the size changes even where mtime is coarse\n")
    assert hw.load(str(path)).value("compute.units") == 66


def test_value_get_source_for_absent_and_unknown_keys():
    h100 = hw.load("h100")
    with pytest.raises(HardwareKeyError, match=r"memory\.hbm\.measured_bandwidth.*optional") as info:
        h100.value("memory.hbm.measured_bandwidth")
    assert isinstance(info.value, KeyError) and isinstance(info.value, AxonError)
    assert h100.get("memory.hbm.measured_bandwidth", 3.0e12) == 3.0e12
    assert h100.get("limits.partition_max") is None  # a trainium key: absent here, not a typo
    with pytest.raises(HardwareKeyError, match=r"memory\.hbm\.bandwith.*did you mean 'memory\.hbm\.bandwidth'"):
        h100.get("memory.hbm.bandwith")
    with pytest.raises(HardwareKeyError, match="limits.partition_max"):
        h100.source("limits.partition_max")


def test_spec_pickles():
    spec = hw.load("trn2")
    again = pickle.loads(pickle.dumps(spec))
    assert again == spec and again.value("memory.psum.bank") == 2048 and again.source("costs.dma_fixed")


def test_returned_lists_are_copies():
    spec = hw.load("h200")
    spec.value("knobs.num_warps").append(64)
    assert spec.value("knobs.num_warps") == [2, 4, 8, 16]


def test_unknown_target_names_the_bundled_ones():
    with pytest.raises(HardwareSpecError, match=r"unknown target 'h20'.*did you mean 'h200'.*trn2"):
        hw.load("h20")


# --------------------------------------------------------------------------------------------- units
@pytest.mark.parametrize(
    ("key", "value", "unit", "base"),
    [
        ("memory.shared.per_sm", 228, "KB", 228_000),
        ("memory.shared.per_sm", 228, "KiB", 233_472),
        ("memory.shared.per_sm", 1.5, "KiB", 1536),
        ("memory.l2.capacity", 50, "MB", 50_000_000),
        ("memory.l2.capacity", 50, "MiB", 52_428_800),
        ("memory.hbm.capacity", 141, "GB", 141_000_000_000),
        ("memory.hbm.capacity", 80, "GiB", 80 * 2**30),
        ("memory.hbm.capacity", 4096, "B", 4096),
        ("memory.hbm.measured_bandwidth", 2.9, "TB/s", 2.9e12),
        ("memory.hbm.measured_bandwidth", 456, "GB/s", 456e9),
        ("memory.hbm.measured_bandwidth", 1000, "B/s", 1000.0),
        ("compute.measured_peak.bf16", 990, "TFLOP/s", 990e12),
        ("compute.measured_peak.bf16", 5, "FLOP/s", 5.0),
        ("costs.launch", 5, "us", 5e-6),
        ("costs.launch", 700, "ns", 7e-7),
        ("costs.launch", 0.25, "s", 0.25),
    ],
)
def test_units_convert_to_base_units(tmp_path, key, value, unit, base):
    doc = _doc("h200")
    _leaf(doc, key).update(value=value, unit=unit)
    doc["memory"]["shared"]["per_block"].update(value=1, unit="KiB")  # stays <= per_sm
    got = hw.load(_write(tmp_path, doc)).value(key)
    assert got == base and type(got) is type(base)


def test_clock_units_on_trainium(tmp_path):
    doc = _doc("trn1")
    _leaf(doc, "compute.engines.vector.clock").update(value=1120000000, unit="Hz")
    spec = hw.load(_write(tmp_path, doc, "trn1"))
    assert spec.value("compute.engines.vector.clock") == 1.12e9
    assert spec.value("compute.engines.tensor.clock") == 2.8e9


# -------------------------------------------------------------------------------------- error per kind
def test_unknown_key(tmp_path):
    doc = _doc("h200")
    doc["memory"]["hbm"]["bandwith"] = {"value": 1, "unit": "B/s", "source": "x"}
    err = _error(_write(tmp_path, doc))
    assert err.key == "memory.hbm.bandwith"
    assert "memory.hbm.bandwith: unknown key; did you mean 'memory.hbm.bandwidth'" in str(err)


def test_unknown_key_inside_a_leaf_and_at_top_level(tmp_path):
    doc = _doc("trn2")
    doc["costs"]["launch"]["note"] = "hi"
    doc["vendorr"] = "aws"
    message = str(_error(_write(tmp_path, doc, "trn2")))
    assert "costs.launch.note: unknown key" in message
    assert "vendorr: unknown key; did you mean 'vendor'" in message


def test_key_of_the_other_kind_is_unknown(tmp_path):
    doc = _doc("h100")
    doc["features"] = {"dma_transpose": {"value": True, "source": "x"}}  # a Trainium feature on a GPU
    assert "features.dma_transpose: unknown key" in str(_error(_write(tmp_path, doc, "h100")))


def test_missing_required_key(tmp_path):
    doc = _doc("trn1")
    del doc["limits"]["matmul"]["moving_free_max"]
    del doc["costs"]
    err = _error(_write(tmp_path, doc, "trn1"))
    assert "limits.matmul.moving_free_max: missing required key" in str(err)
    assert "costs.dma_fixed: missing required key" in str(err)
    assert "costs.launch: missing required key" in str(err)


def test_missing_optional_key_is_fine(tmp_path):
    doc = _doc("h200")
    del doc["memory"]["hbm"]["measured_bandwidth"]
    assert hw.load(_write(tmp_path, doc)).get("memory.hbm.measured_bandwidth") is None


@pytest.mark.parametrize("bad", ["4.8 TB/s", "1e9", True, [4.8], None])
def test_wrong_type(tmp_path, bad):
    doc = _doc("h200")
    _leaf(doc, "memory.hbm.bandwidth")["value"] = bad
    err = _error(_write(tmp_path, doc))
    assert err.key == "memory.hbm.bandwidth"
    assert "memory.hbm.bandwidth:" in str(err) and ("wrong type" in str(err) or "missing value" in str(err))


def test_wrong_type_for_count_bool_str_and_lists(tmp_path):
    doc = _doc("trn2")
    _leaf(doc, "limits.partition_max")["value"] = 128.5
    _leaf(doc, "features.dma_transpose")["value"] = "yes"
    _leaf(doc, "features.nki_dialect")["value"] = 2
    doc["memory"]["sbuf"] = 28
    message = str(_error(_write(tmp_path, doc, "trn2")))
    assert "limits.partition_max: wrong type: a count is a whole number" in message
    assert "features.dma_transpose: wrong type: expected true or false" in message
    assert "features.nki_dialect: wrong type" in message
    assert "memory.sbuf: expected a section" in message
    assert "memory.sbuf.partitions" not in message  # already reported through its section
    gpu = _doc("intel-xe2")
    _leaf(gpu, "knobs.num_warps")["value"] = [4, "8"]
    _leaf(gpu, "knobs.grf_mode")["value"] = ["default", 128]
    message = str(_error(_write(tmp_path, gpu, "intel-xe2")))
    assert "knobs.num_warps: wrong type: expected a non-empty list of integers" in message
    assert "knobs.grf_mode: wrong type: expected a non-empty list of strings" in message


def test_bare_number_instead_of_a_leaf_mapping(tmp_path):
    doc = _doc("h200")
    doc["compute"]["units"] = 132
    assert "compute.units: expected a mapping {value, unit, source}" in str(_error(_write(tmp_path, doc)))


@pytest.mark.parametrize(("key", "unit", "said"), [
    ("memory.shared.per_sm", "B/s", "a bandwidth unit"),
    ("memory.hbm.bandwidth", "GB", "a bytes unit"),
    ("costs.launch", "GHz", "a frequency unit"),
    ("compute.peak.bf16", "TFLOPS", "not a known unit"),
    ("compute.units", "B", "a bytes unit"),
])
def test_wrong_unit(tmp_path, key, unit, said):
    doc = _doc("h200")
    _leaf(doc, key)["unit"] = unit
    err = _error(_write(tmp_path, doc))
    assert err.key == key
    assert f"{key}: wrong unit {unit!r} ({said})" in str(err)


def test_missing_unit_and_unit_on_a_bool(tmp_path):
    doc = _doc("trn1")
    del _leaf(doc, "costs.dma_fixed")["unit"]
    _leaf(doc, "features.dma_transpose")["unit"] = "count"
    message = str(_error(_write(tmp_path, doc, "trn1")))
    assert "costs.dma_fixed: missing unit; expected one of s, us, ns" in message
    assert "features.dma_transpose: wrong unit 'count'" in message


@pytest.mark.parametrize("bad", [0, -4.8, float("inf")])
def test_non_positive(tmp_path, bad):
    doc = _doc("h200")
    _leaf(doc, "memory.hbm.bandwidth")["value"] = bad
    err = _error(_write(tmp_path, doc))
    assert err.key == "memory.hbm.bandwidth"
    assert "must be positive" in str(err) or "must be a finite number" in str(err)


def test_non_positive_list_entry_and_fractional_bytes(tmp_path):
    doc = _doc("h200")
    _leaf(doc, "knobs.num_warps")["value"] = [0, 4]
    _leaf(doc, "memory.shared.per_sm").update(value=0.5, unit="B")
    message = str(_error(_write(tmp_path, doc)))
    assert "knobs.num_warps: must be positive" in message
    assert "memory.shared.per_sm: 0.5 B is not a whole number of B" in message


def test_missing_source(tmp_path):
    doc = _doc("h200")
    del _leaf(doc, "compute.peak.fp32")["source"]
    _leaf(doc, "compute.units")["source"] = "  "
    message = str(_error(_write(tmp_path, doc)))
    assert "compute.peak.fp32: needs a source" in message
    assert "compute.units: needs a source" in message


@pytest.mark.parametrize(("text", "said"), [
    ("name: h200\nkind: gpu\nmemory: {hbm: [1, 2}\n", "malformed YAML at line 3"),
    ("name: h200\n\tkind: gpu\n", "malformed YAML"),
    ("- just\n- a list\n", "expected a mapping at top level"),
    ("", "expected a mapping at top level"),
    ("name: h200\nkind: gpu\nname: h100\n", "key 'name' written twice"),
])
def test_malformed_yaml(tmp_path, text, said):
    assert said in str(_error(_write(tmp_path, text)))


@pytest.mark.parametrize(("kind", "said"), [
    ("tpu", "kind: unknown kind 'tpu'; expected one of gpu, trainium"),
    (3, "kind: expected a non-empty string, got int 3"),
])
def test_unknown_kind(tmp_path, kind, said):
    doc = _doc("h200")
    doc["kind"] = kind
    err = _error(_write(tmp_path, doc))
    assert err.key == "kind" and said in str(err)


def test_missing_top_level_keys_and_name_mismatch(tmp_path):
    doc = _doc("h200")
    del doc["vendor"]
    doc["name"] = "h100"
    message = str(_error(_write(tmp_path, doc)))
    assert "vendor: missing required key" in message
    assert "name: 'h100' differs from the file name 'h200'" in message


def test_cross_checks(tmp_path):
    doc = _doc("h200")
    _leaf(doc, "memory.shared.per_block")["value"] = 300
    _leaf(doc, "knobs.num_stages.min")["value"] = 6
    message = str(_error(_write(tmp_path, doc)))
    assert "memory.shared.per_block: 307200 exceeds memory.shared.per_sm = 233472" in message
    assert "knobs.num_stages.min: 6 exceeds knobs.num_stages.max = 5" in message
    trn = _doc("trn2")
    _leaf(trn, "memory.psum.banks")["value"] = 4
    assert "memory.psum.per_partition: 16384 B is not memory.psum.banks x memory.psum.bank" in \
        str(_error(_write(tmp_path, trn, "trn2")))


def test_a_bad_bundled_target_name_is_not_a_path_lookup():
    with pytest.raises(HardwareSpecError, match="cannot read the file"):
        hw.load("does/not/exist.yaml")


# ------------------------------------------------------------------------------------------- property
def _wrong_values(field: Field) -> list[Any]:
    if field.type == "quantity":
        return ["fast", "12 GB", True, [1], {"a": 1}, None] + ([2.5] if field.family == "count" else [])
    if field.type == "bool":
        return [1, 0, "yes", "true", [True], None]
    if field.type == "str":
        return [3, 2.5, True, ["legacy"], {"a": "b"}, None]
    if field.type == "list[int]":
        return [4, "4", [1.5], [True], ["a"], [], {"a": 1}, None]
    if field.type == "list[str]":
        return ["default", 128, [128], [True], [], None]
    raise AssertionError(field.type)


@given(data=st.data())
def test_any_leaf_mutated_to_a_wrong_type_is_named(data):
    target = data.draw(st.sampled_from(sorted(BUNDLED)), label="target")
    spec = hw.load(target)
    key = data.draw(st.sampled_from(spec.keys()), label="key")
    bad = data.draw(st.sampled_from(_wrong_values(SCHEMA[spec.kind][key])), label="value")
    doc = _doc(target)
    _leaf(doc, key)["value"] = bad
    with tempfile.TemporaryDirectory() as folder:
        path = _write(Path(folder), doc, target)
        with pytest.raises(HardwareSpecError) as info:
            hw.load(path)
    assert info.value.key == key
    assert f"{path}: {key}: " in str(info.value)


@given(data=st.data())
def test_any_leaf_replaced_by_a_bare_value_is_named(data):
    target = data.draw(st.sampled_from(sorted(BUNDLED)), label="target")
    spec = hw.load(target)
    key = data.draw(st.sampled_from(spec.keys()), label="key")
    doc = _doc(target)
    _set_leaf(doc, key, _leaf(doc, key)["value"])  # `units: 132` instead of `units: {value: 132, ...}`
    with tempfile.TemporaryDirectory() as folder:
        path = _write(Path(folder), doc, target)
        with pytest.raises(HardwareSpecError) as info:
            hw.load(path)
    assert info.value.key == key


# ---------------------------------------------------------------------------------------- tile templates
@pytest.mark.parametrize("bad", [[16], [256, 16], [16, 100], [16, 256, 512]])
def test_a_tile_range_is_two_ascending_powers_of_two(tmp_path, bad):
    doc = _doc("h200")
    _leaf(doc, "tiles.matmul.block_m")["value"] = bad
    err = _error(_write(tmp_path, doc))
    assert err.key == "tiles.matmul.block_m" and "expected a tile range [lo, hi]" in str(err)


def test_tile_ranges_and_default_warps_are_required_and_checked(tmp_path):
    spec = hw.load("h200")
    assert spec.value("tiles.matmul.block_m") == [16, 256] and spec.value("knobs.default_num_warps") == 4
    assert hw.load("trn2").value("tiles.matmul.tile_n") == [64, 2048]
    doc = _doc("h200")
    del doc["tiles"]["split_k"]
    _leaf(doc, "knobs.default_num_warps")["value"] = 3
    message = str(_error(_write(tmp_path, doc)))
    assert "tiles.split_k.block_r: missing required key (a tile range [lo, hi] of powers of two" in message
    doc = _doc("h200")
    _leaf(doc, "knobs.default_num_warps")["value"] = 32
    assert "knobs.default_num_warps: 32 is not one of knobs.num_warps [2, 4, 8, 16]" in str(_error(_write(tmp_path, doc)))
