"""storage.partition_metadata (Kafka's PartitionMetadataFile) and what the log manager
does with it: every partition directory records its topic id, and a directory of an
earlier topic of the same name is set aside as stray, never served."""

import base64
import os
import uuid

import pytest

from storage import partition_metadata as PM
from storage.log_manager import TOPICS_FILE
from tests.unit.test_log_helpers import append, build_batch
from tests.unit.test_log_manager import deferred_manager, manager


def test_kafka_uuid_strings_round_trip():
    u = uuid.UUID("f12e0b4d-bc5c-4735-acff-5166bd43b81f")
    s = PM.kafka_uuid(u)
    assert s == "8S4LTbxcRzWs_1FmvUO4Hw" and len(s) == 22
    assert base64.urlsafe_b64decode(s + "==") == u.bytes
    assert PM.parse_kafka_uuid(s) == u
    for bad in ("", "abc", "8S4LTbxcRzWs_1FmvUO4H", "8S4LTbxcRzWs_1FmvUO4Hw=="):
        with pytest.raises(ValueError):
            PM.parse_kafka_uuid(bad)


def test_file_is_kafkas_format(tmp_path):
    u = uuid.uuid4()
    PM.write(str(tmp_path), u)
    assert (tmp_path / PM.FILE_NAME).read_text() == f"version: 0\ntopic_id: {PM.kafka_uuid(u)}\n"
    assert PM.read(str(tmp_path)) == u
    assert PM.read(str(tmp_path / "nothing")) is None


@pytest.mark.parametrize("body", ["version: 1\ntopic_id: 8S4LTbxcRzWs_1FmvUO4Hw\n", "version 0\n",
                                  "version: 0\ntopic_id: nope\n", "version: 0\n"])
def test_malformed_files_are_named(tmp_path, body):
    (tmp_path / PM.FILE_NAME).write_text(body)
    with pytest.raises(PM.PartitionMetadataError, match=PM.FILE_NAME):
        PM.read(str(tmp_path))


def test_every_partition_records_its_topic_id_and_keeps_it(tmp_path):
    m = manager([tmp_path])
    info = m.create_topic("events", 2)
    m.create_partitions("events", 3)
    for p in range(3):
        assert PM.read(str(tmp_path / f"events-{p}")) == info.topic_id
    m.shutdown()
    m = manager([tmp_path])
    assert m.topics()["events"].topic_id == info.topic_id
    m.shutdown()


@pytest.mark.parametrize("deferred", [False, True], ids=["loaded-at-start", "loaded-on-first-use"])
def test_a_directory_of_an_earlier_topic_id_is_set_aside(tmp_path, caplog, deferred):
    m = manager([tmp_path])
    old = m.create_topic("events", 1)
    append(m.get_log("events", 0), [build_batch([(1000, b"old")])])
    m.shutdown()
    # the topic metadata now names a new incarnation of "events" (as after a delete whose
    # directory rename was lost, then a create): the old data must not be served under it
    import json

    doc = json.loads((tmp_path / TOPICS_FILE).read_text())
    new_id = uuid.uuid4()
    doc["topics"]["events"]["topic_id"] = str(new_id)
    (tmp_path / TOPICS_FILE).write_text(json.dumps(doc))
    m = (deferred_manager if deferred else manager)([tmp_path])  # deferred: the check runs at first use
    log = m.get_log("events", 0)
    assert log.log_end_offset == 0 and PM.read(log.dir) == new_id
    stray = tmp_path / f"events-0.{old.topic_id.hex}-stray"
    assert stray.is_dir() and PM.read(str(stray)) == old.topic_id
    assert any(f.endswith(".log") and os.path.getsize(stray / f) > 0 for f in os.listdir(stray))
    assert "stray" in caplog.text and PM.kafka_uuid(old.topic_id) in caplog.text
    m.shutdown()
    # a second start leaves the stray directory alone
    m = manager([tmp_path])
    assert stray.is_dir() and m.get_log("events", 0).log_end_offset == 0
    m.shutdown()
