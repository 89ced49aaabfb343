"""The loader admits a stored rule only as proved: an edit with a recomputed digest is re-proved on load.

Each test loads a copy of one small family file with its own record directory (``$AXON_EG_PROOF_CACHE``), so
the record of what this machine proved (``proofs.ProvedHere``) starts empty or holds what the test puts
in it, and never touches the user's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from axon_eg.rules_discovered import store
from axon_eg.rules_discovered.store import RuleStoreError, load_rules, load_stored


@pytest.fixture
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty record directory of its own, and the loader's in-process cache cleared before and after."""
    monkeypatch.setenv("AXON_EG_PROOF_CACHE", str(tmp_path / "cache"))
    store._load_cached.cache_clear()
    yield tmp_path
    store._load_cached.cache_clear()


def _copy(tmp_path: Path, *families: str) -> Path:
    target = tmp_path / "data"
    target.mkdir()
    for family in families:
        shutil.copy(store.DATA / f"{family}.json", target)
    return target


def _edit(path: Path, name: str, edit: Any, *, forge: bool = True) -> None:
    """Edit one entry as an editor who knows the digest would: recompute it afterwards (``forge``)."""
    body = json.loads(path.read_text())
    for e in body["entries"]:
        if e["name"] == name:
            edit(e)
            if forge:
                e["digest"] = store.digest(e)
    path.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")


def _count_reproofs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = store.reprove
    monkeypatch.setattr(store, "reprove", lambda entry, where="the store": seen.append(entry["name"]) or real(entry, where))
    return seen


def test_a_forged_rule_is_refused_naming_the_rule_and_file(fresh: Path) -> None:
    data = _copy(fresh, "transpose_matmul")
    _edit(data / "transpose_matmul.json", "transpose_through_matmul",
          lambda e: e.update(rhs="(neg (matmul (transpose :perm [1 0] ?B) (transpose :perm [1 0] ?A)))"))
    store.check_entry(next(e for e, _ in store.load_entries(data) if e["name"] == "transpose_through_matmul"),
                      "transpose_matmul.json")  # record and digest look fine ...
    with pytest.raises(RuleStoreError) as refused:  # ... the load re-proves the text and refuses it
        load_rules(data)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("rule transpose_through_matmul in transpose_matmul.json: not the text that was proved"), message
    assert "its re-proof gave refuted" in message and "`axon-eg rules discover`" in message


def test_a_forged_rule_is_refused_even_after_the_rest_was_on_record(fresh: Path) -> None:
    """Keys are over the whole entry: the record of the true rule does not cover its edited text."""
    data = _copy(fresh, "transpose_matmul")
    store.remember([e for e, _ in store.load_entries(data)])
    _edit(data / "transpose_matmul.json", "transpose_through_matmul",
          lambda e: e.update(lhs=e["rhs"], rhs=e["lhs"].replace("[1 0]", "[0 1]")))
    with pytest.raises(RuleStoreError, match=r"^rule transpose_through_matmul in transpose_matmul\.json: not the text"):
        load_stored(data)


def test_a_forged_float_safety_verdict_is_refused(fresh: Path) -> None:
    data = _copy(fresh, "shift")
    _edit(data / "shift.json", "softmax_drop_max_shift", lambda e: e["float_safe"].update(forward=True))
    with pytest.raises(RuleStoreError, match=r"^rule softmax_drop_max_shift in shift\.json: its float-safety verdict is "
                                             r"not the one a re-check gives \(forward safe -> unsafe"):
        load_rules(data)


def test_a_changed_but_true_rule_is_re_proved_once_and_admitted(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _copy(fresh, "transpose_matmul")
    store.remember([e for e, _ in store.load_entries(data)])
    _edit(data / "transpose_matmul.json", "transpose_through_matmul", lambda e: e["proof"].update(seconds=123.0))
    seen = _count_reproofs(monkeypatch)
    assert "transpose_through_matmul" in {r.name for r in load_rules(data)}
    assert seen == ["transpose_through_matmul"]  # only the changed entry
    store._load_cached.cache_clear()
    load_rules(data)
    assert seen == ["transpose_through_matmul"]  # recorded: the next load does not prove it again


def test_an_untouched_store_on_record_loads_without_a_proof(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _copy(fresh, "transpose_matmul", "shift", "swap")
    seen = _count_reproofs(monkeypatch)
    first = load_rules(data)  # a fresh machine: each entry proved once
    assert sorted(seen) == sorted(e["name"] for e, _ in store.load_entries(data))
    seen.clear()
    store._load_cached.cache_clear()
    assert [r.name for r in load_rules(data)] == [r.name for r in first] and seen == []


def test_an_unwritable_cache_still_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("not a directory")
    monkeypatch.setenv("AXON_EG_PROOF_CACHE", str(tmp_path / "file"))
    store._load_cached.cache_clear()
    try:
        assert load_rules(_copy(tmp_path, "transpose_matmul"))
    finally:
        store._load_cached.cache_clear()


def test_the_record_lives_outside_the_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """By default in the user's cache; a run's ``$AXON_EG_CACHE`` (measurements) does not move it."""
    from axon_eg.proofs import proof_cache_dir

    monkeypatch.delenv("AXON_EG_PROOF_CACHE", raising=False)
    monkeypatch.setenv("AXON_EG_CACHE", str(tmp_path))
    assert proof_cache_dir() == Path.home() / ".cache" / "axon_eg" / "proved"
    assert not proof_cache_dir().is_relative_to(store.DATA.parents[3])  # not in the checkout
    assert store.semantics_hash()[:20] in store.proved_here().path.name
