"""storage.entity_configs: per-entity config overrides on disk (group configs, quotas)."""

import os

import pytest

from storage.entity_configs import EntityConfigError, EntityConfigStore


def test_round_trip_encoding_and_removal(tmp_path):
    s = EntityConfigStore(str(tmp_path), "group-configs")
    assert s.get("g") == {} and not (tmp_path / "group-configs").exists()
    s.set("billing", {"consumer.session.timeout.ms": "50000"})
    s.set("odd name/ü=%", {"a b": "x=y z", "k": ""})
    text = (tmp_path / "group-configs").read_text()
    assert text.splitlines()[0] == "chronolog-entity-configs 1 group-configs"
    assert "billing consumer.session.timeout.ms=50000" in text.splitlines()
    again = EntityConfigStore(str(tmp_path), "group-configs")
    assert again.all() == {"billing": {"consumer.session.timeout.ms": "50000"},
                           "odd name/ü=%": {"a b": "x=y z", "k": ""}}
    again.set("billing", {})
    assert EntityConfigStore(str(tmp_path), "group-configs").all() == {"odd name/ü=%": {"a b": "x=y z", "k": ""}}
    # a copy is handed out
    again.get("odd name/ü=%")["a b"] = "changed"
    assert again.get("odd name/ü=%")["a b"] == "x=y z"


def test_kinds_do_not_mix_and_damage_is_named(tmp_path):
    EntityConfigStore(str(tmp_path), "group-configs").set("g", {"a": "1"})
    os.rename(tmp_path / "group-configs", tmp_path / "client-quotas")
    with pytest.raises(EntityConfigError, match="line 1 must be 'chronolog-entity-configs 1 client-quotas'"):
        EntityConfigStore(str(tmp_path), "client-quotas")
    (tmp_path / "group-configs").write_text("chronolog-entity-configs 1 group-configs\ng a=1\ng novalue\n")
    with pytest.raises(EntityConfigError, match=r"group-configs: line 3 is not"):
        EntityConfigStore(str(tmp_path), "group-configs")
    (tmp_path / "group-configs").write_text("chronolog-entity-configs 1 group-configs\ng a=1\ng b=2\n")
    with pytest.raises(EntityConfigError, match="line 3"):  # one line per entity
        EntityConfigStore(str(tmp_path), "group-configs")
