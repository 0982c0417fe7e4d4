"""Argument parsing of the Kafka command-line tools (broker.tools): datetimes, durations,
--time, partition lists, --add-config, flag combinations. No broker needed."""

from __future__ import annotations

import datetime as dt

import pytest

from broker import cli
from broker.tools import UsageError
from broker.tools.configs import parse_add_config, parse_delete_config
from broker.tools.consumer_groups import parse_topic_spec, validate_args
from broker.tools.get_offsets import parse_partitions
from broker.tools.client import parse_bootstrap
from broker.tools.timeparse import parse_datetime, parse_duration, parse_time_spec
from broker.tools.topics import parse_config_pairs

T0 = 1795255200000  # 2026-11-21T10:00:00Z


@pytest.mark.parametrize("text,ms", [
    ("2026-11-21T10:00:00Z", T0),
    ("2026-11-21T10:00:00z", T0),
    ("2026-11-21T10:00:00.000Z", T0),
    ("2026-11-21T10:00:00.123Z", T0 + 123),
    ("2026-11-21T10:00:00.1Z", T0 + 100),
    ("2026-11-21T10:00:00.123456789Z", T0 + 123),
    ("2026-11-21T10:00:00,5Z", T0 + 500),
    ("2026-11-21T11:00:00+01:00", T0),
    ("2026-11-21T11:00:00+0100", T0),
    ("2026-11-21T11:00:00+01", T0),
    ("2026-11-21T04:30:00-05:30", T0),
    ("2026-11-21T10:00Z", T0),
    ("2026-11-21 10:00:00Z", T0),
    ("2026-11-21T10:00:00.250+00:00", T0 + 250),
    ("1970-01-01T00:00:00Z", 0),
])
def test_parse_datetime(text, ms):
    assert parse_datetime(text) == ms


def test_parse_datetime_without_zone_is_local_time():
    local = dt.datetime(2026, 11, 21, 10, 0, 0).astimezone()
    assert parse_datetime("2026-11-21T10:00:00") == int(local.timestamp() * 1000)
    midnight = dt.datetime(2026, 11, 21).astimezone()
    assert parse_datetime("2026-11-21") == int(midnight.timestamp() * 1000)


@pytest.mark.parametrize("text", ["", "yesterday", "2026-13-01T00:00:00Z", "2026-11-21T25:00:00Z",
                                  "2026-11-21T10:00:00+25:00", "2026/11/21 10:00", "21-11-2026",
                                  "2026-11-21T10", "2026-11-21T10:00:00 UTC", "1795255200000"])
def test_parse_datetime_rejects(text):
    with pytest.raises(UsageError) as e:
        parse_datetime(text, "--to-datetime")
    msg = str(e.value)
    assert msg.startswith("--to-datetime: ") and repr(text) in msg and "\n" not in msg


@pytest.mark.parametrize("text,ms", [
    ("PT1H", 3_600_000),
    ("PT30M", 1_800_000),
    ("PT45S", 45_000),
    ("PT0.5S", 500),
    ("PT1.250S", 1_250),
    ("P1D", 86_400_000),
    ("P2DT3H4M5S", ((2 * 24 + 3) * 60 + 4) * 60_000 + 5_000),
    ("pt5h30m", 19_800_000),
    ("-PT6H", -21_600_000),
    ("PT-6H", -21_600_000),
    ("PT1H-10M", 3_000_000),
    ("+P1D", 86_400_000),
    ("PT-1.5S", -1_500),
])
def test_parse_duration(text, ms):
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["", "P", "PT", "1H", "P1H", "PT1D", "P1DT", "5 hours", "PT1.H", "P1W", "PT1H30"])
def test_parse_duration_rejects(text):
    with pytest.raises(UsageError) as e:
        parse_duration(text)
    assert str(e.value).startswith("--by-duration: ") and repr(text) in str(e.value)


@pytest.mark.parametrize("text,value", [
    ("latest", -1), ("-1", -1), ("LATEST", -1), ("earliest", -2), ("-2", -2),
    ("max-timestamp", -3), ("-3", -3), ("earliest-local", -4), ("-4", -4), ("latest-tiered", -5), ("-5", -5),
    ("0", 0), ("1795255200000", T0), ("2026-11-21T10:00:00Z", T0), ("2026-11-21T10:00:00.001+00:00", T0 + 1),
])
def test_parse_time_spec(text, value):
    assert parse_time_spec(text) == value


@pytest.mark.parametrize("text", ["-6", "-100", "now", "1.5", "2026-11-21T99:00:00Z", ""])
def test_parse_time_spec_rejects(text):
    with pytest.raises(UsageError) as e:
        parse_time_spec(text)
    assert str(e.value).startswith("--time: ") and repr(text) in str(e.value)


def test_parse_partitions():
    assert parse_partitions("0") == [0]
    assert parse_partitions("3,1,1") == [1, 3]
    assert parse_partitions("0,2-4") == [0, 2, 3, 4]
    for bad in ("", "a", "1,", "-1", "4-2", "1;2"):
        with pytest.raises(UsageError, match="--partitions"):
            parse_partitions(bad)


def test_parse_topic_spec():
    assert parse_topic_spec("events") == ("events", None)
    assert parse_topic_spec("events:0,2") == ("events", [0, 2])
    for bad in (":0", "events:", "events:x"):
        with pytest.raises(UsageError, match="--topic"):
            parse_topic_spec(bad)


def test_parse_bootstrap():
    assert parse_bootstrap("localhost:9092") == [("localhost", 9092)]
    assert parse_bootstrap("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap("[::1]:9092") == [("::1", 9092)]
    for bad in ("", "localhost", "localhost:", ":9092", "h:99999", "h:x"):
        with pytest.raises(UsageError, match="--bootstrap-server"):
            parse_bootstrap(bad)


def test_parse_add_config():
    assert parse_add_config("retention.ms=1000") == {"retention.ms": "1000"}
    assert parse_add_config("a=1,b=2") == {"a": "1", "b": "2"}
    assert parse_add_config("cleanup.policy=[compact,delete],x=y") == {"cleanup.policy": "compact,delete", "x": "y"}
    assert parse_add_config("a=") == {"a": ""}
    assert parse_add_config("a=b=c") == {"a": "b=c"}
    for bad in ("", "novalue", "=1", "a=[1,2", "a=1]", ","):
        with pytest.raises(UsageError, match="--add-config"):
            parse_add_config(bad)
    assert parse_delete_config(["a,b", "c"]) == ["a", "b", "c"]


def test_parse_config_pairs():
    assert parse_config_pairs(["a=1", "b=x=y"]) == {"a": "1", "b": "x=y"}
    with pytest.raises(UsageError, match="--config"):
        parse_config_pairs(["a"])


def _groups(*argv):
    return cli.build_parser().parse_args(["consumer-groups", "--bootstrap-server", "h:1", *argv])


@pytest.mark.parametrize("argv,word", [
    (["--describe"], "--group"),
    (["--reset-offsets", "--group", "g", "--topic", "t"], "--to-datetime"),
    (["--reset-offsets", "--group", "g", "--to-earliest"], "--all-topics"),
    (["--reset-offsets", "--group", "g", "--to-earliest", "--to-latest", "--topic", "t"], "--to-latest"),
    (["--reset-offsets", "--group", "g", "--to-earliest", "--topic", "t", "--all-topics"], "--all-topics"),
    (["--reset-offsets", "--group", "g", "--to-offset", "-1", "--topic", "t"], "--to-offset"),
    (["--reset-offsets", "--group", "g", "--to-datetime", "noon", "--topic", "t"], "noon"),
    (["--reset-offsets", "--group", "g", "--by-duration", "1h", "--topic", "t"], "1h"),
    (["--reset-offsets", "--group", "g", "--to-latest", "--topic", "t:x"], "t:x"),
    (["--list", "--group", "g"], "--list"),
    (["--describe", "--group", "g", "--to-latest"], "--describe"),
])
def test_consumer_groups_flag_validation(argv, word):
    with pytest.raises(UsageError) as e:
        validate_args(_groups(*argv))
    assert word in str(e.value)


def test_consumer_groups_valid_flags():
    validate_args(_groups("--list"))
    validate_args(_groups("--describe", "--group", "g"))
    validate_args(_groups("--reset-offsets", "--group", "g", "--to-datetime", "2026-11-21T10:00:00Z",
                          "--topic", "t:0,1", "--topic", "u", "--execute"))
    validate_args(_groups("--reset-offsets", "--group", "g", "--by-duration", "PT1H", "--all-topics"))


def test_dry_run_and_execute_are_exclusive(capsys):
    with pytest.raises(SystemExit) as e:
        _groups("--reset-offsets", "--group", "g", "--to-latest", "--all-topics", "--dry-run", "--execute")
    assert e.value.code == 2


@pytest.mark.parametrize("argv,word,code", [
    (["get-offsets", "--bootstrap-server", "h:1", "--time", "soon"], "--time", 2),
    (["get-offsets", "--bootstrap-server", "nohost", "--topic", "t"], "--bootstrap-server", 2),
    (["topics", "--bootstrap-server", "h:1", "--delete"], "--topic", 2),
    (["topics", "--bootstrap-server", "h:1", "--alter", "--topic", "t"], "--partitions", 2),
    (["topics", "--bootstrap-server", "h:1", "--list", "--config", "a=b"], "--config", 2),
    (["configs", "--bootstrap-server", "h:1", "--entity-type", "topics", "--describe"], "--entity-name", 2),
    (["configs", "--bootstrap-server", "h:1", "--entity-type", "topics", "--entity-name", "t", "--alter"],
     "--add-config", 2),
    (["configs", "--bootstrap-server", "h:1", "--entity-type", "topics", "--entity-name", "t", "--alter",
      "--add-config", "a=1", "--delete-config", "a"], "a", 2),
    (["consumer-groups", "--bootstrap-server", "h:1", "--reset-offsets", "--group", "g", "--topic", "t"],
     "--to-datetime", 2),
])
def test_usage_errors_exit_2_before_connecting(argv, word, code, capsys):
    # h:1 is never contacted: the flags are rejected first
    assert cli.main(argv) == code
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and word in err, err


def test_argparse_usage_errors_exit_2(capsys):
    for argv in (["get-offsets"], ["topics", "--bootstrap-server", "h:1"],
                 ["configs", "--bootstrap-server", "h:1", "--entity-type", "widgets", "--describe"],
                 ["consumer-groups", "--bootstrap-server", "h:1", "--list", "--describe"]):
        with pytest.raises(SystemExit) as e:
            cli.main(argv)
        assert e.value.code == 2, argv


# ---------------------------------------------------------------- OffsetFetch shapes (v7 and v8+)


class _FakeCoord:
    """Answers OffsetFetch with ``response`` after encoding the request for ``version``
    with our codec (so a request the version cannot carry fails here)."""

    def __init__(self, version, response):
        self.version, self.response, self.sent = version, response, None

    def version_for(self, api_key):
        assert api_key == 9
        return self.version

    def request(self, body, version):
        from protocol import codec
        from protocol.messages import RequestHeader

        codec.encode_request(RequestHeader(api_key=9, api_version=version, correlation_id=1, client_id="t"), body)
        self.sent = body
        return version, self.response


@pytest.mark.parametrize("version", [2, 7])
def test_fetch_committed_before_v8(version):
    from broker.tools.consumer_groups import fetch_committed
    from protocol.messages import OffsetFetchResponse as R

    resp = R(topics=[R.OffsetFetchResponseTopic(name="t", partitions=[
        R.OffsetFetchResponsePartition(partition_index=0, committed_offset=7, error_code=0),
        R.OffsetFetchResponsePartition(partition_index=1, committed_offset=-1, error_code=0)])])
    coord = _FakeCoord(version, resp)
    assert fetch_committed(coord, "g") == {("t", 0): 7}
    assert coord.sent.group_id == "g" and coord.sent.topics is None
    fetch_committed(coord, "g", [("t", 0), ("t", 1)])
    assert [(t.name, t.partition_indexes) for t in coord.sent.topics] == [("t", [0, 1])]


@pytest.mark.parametrize("version", [8, 9])
def test_fetch_committed_v8_batched_groups(version):
    from broker.tools.consumer_groups import fetch_committed
    from protocol.messages import OffsetFetchResponse as R

    resp = R(groups=[R.OffsetFetchResponseGroup(group_id="g", error_code=0, topics=[
        R.OffsetFetchResponseTopics(name="t", partitions=[
            R.OffsetFetchResponsePartitions(partition_index=2, committed_offset=11, error_code=0)])])])
    coord = _FakeCoord(version, resp)
    assert fetch_committed(coord, "g") == {("t", 2): 11}
    assert [g.group_id for g in coord.sent.groups] == ["g"] and coord.sent.groups[0].topics is None
    fetch_committed(coord, "g", [("t", 2)])
    assert [(t.name, t.partition_indexes) for t in coord.sent.groups[0].topics] == [("t", [2])]


def test_fetch_committed_group_error_is_a_tool_error():
    from broker.tools import ToolError
    from broker.tools.consumer_groups import fetch_committed
    from protocol.messages import OffsetFetchResponse as R

    coord = _FakeCoord(8, R(groups=[R.OffsetFetchResponseGroup(group_id="g", error_code=30, topics=[])]))
    with pytest.raises(ToolError, match="GROUP_AUTHORIZATION_FAILED"):
        fetch_committed(coord, "g")


def test_configs_quota_entities_and_java_doubles():
    import argparse

    from broker.tools import UsageError
    from broker.tools.configs import _java_double, _normalize

    def norm(**kw):
        ns = argparse.Namespace(entity_types=None, entity_names=None, shorthand=None)
        for k, v in kw.items():
            setattr(ns, k, v)
        _normalize(ns)
        return ns

    ns = norm(entity_types=["users", "clients"], entity_names=["alice", ""])
    assert ns.quota_entity == [("users", "alice"), ("clients", "")] and ns.entity_name == "alice"
    ns = norm(shorthand=[("users", ""), ("clients", "app")])
    assert ns.quota_entity == [("users", ""), ("clients", "app")] and ns.entity_default
    assert norm(entity_types=["ips"]).quota_entity == [("ips", None)]
    for bad, words in ((dict(entity_types=["users", "ips"]), "only users and clients"),
                       (dict(entity_types=["users"], entity_names=["a", "b"]), "more --entity-name"),
                       (dict(entity_types=["users", "users"]), "once"),
                       (dict(entity_types=["users"], shorthand=[("users", "a")]), "not both"),
                       (dict(), "required")):
        with pytest.raises(UsageError, match=words):
            norm(**bad)
    assert [_java_double(v) for v in (1024.0, 0.5, 12.5, 1e7, 20000000.0, 1048576.0, 1.5e-4, 0.0)] == [
        "1024.0", "0.5", "12.5", "1.0E7", "2.0E7", "1048576.0", "1.5E-4", "0.0"]
