"""java.util.Properties text format and ConfigDef-style value parsing."""

import pytest
from hypothesis import given, settings, strategies as st

from config import ConfigError, parse_properties
from config.properties import ConfigKey, ConfigType, Range, java_trim, load_properties, parse_value, value_to_string


@pytest.mark.parametrize(
    "text, expected",
    [
        ("key=value", {"key": "value"}),
        ("key = value", {"key": "value"}),
        ("key:value", {"key": "value"}),
        ("key value", {"key": "value"}),
        ("key\tvalue", {"key": "value"}),
        ("key\fvalue", {"key": "value"}),
        ("   key  =  value  ", {"key": "value  "}),  # trailing whitespace is kept
        ("key  :  value", {"key": "value"}),
        ("key = = v", {"key": "= v"}),  # one separator only
        ("a=b=c", {"a": "b=c"}),
        ("key", {"key": ""}),
        ("key=", {"key": ""}),
        ("key=val#notcomment", {"key": "val#notcomment"}),
        ("# comment\n! also comment\n   # indented\nk=v", {"k": "v"}),
        ("\n\n   \n\t\nk=v\n\n", {"k": "v"}),
        ("a\\=b=c", {"a=b": "c"}),
        ("a\\:b:c", {"a:b": "c"}),
        ("my\\ key=v", {"my key": "v"}),
        ("\\#notcomment=1", {"#notcomment": "1"}),
        ("k=\\u0041\\u00e9", {"k": "Aé"}),
        ("k=\\t\\n\\r\\f", {"k": "\t\n\r\f"}),
        ("k=\\q\\\\", {"k": "q\\"}),  # unknown escape = the char itself; \\ = backslash
        ("k=a\\\\", {"k": "a\\"}),  # even number of backslashes: no continuation
        ("k=a\\\n    b", {"k": "ab"}),
        ("fruits apple, banana, \\\n        pear, \\\n        cherry", {"fruits": "apple, banana, pear, cherry"}),
        ("k=a\\\r\n  b\r\nj=c", {"k": "ab", "j": "c"}),
        ("k=a\\\r  b\rj=c", {"k": "ab", "j": "c"}),
        ("k=a\\\n#b", {"k": "a#b"}),  # a continuation line is never a comment
        ("# comment \\\nk=v", {"k": "v"}),  # a comment line never continues
        ("k=v\\", {"k": "v"}),  # backslash at end of input dropped
        ("k=1\nk=2", {"k": "2"}),  # last wins
        ("\ufeffk=v", {"k": "v"}),  # BOM
        ("k=\\\n", {"k": ""}),
    ],
)
def test_parse_properties(text, expected):
    assert parse_properties(text) == expected


def test_malformed_unicode_escape():
    with pytest.raises(ConfigError) as ei:
        parse_properties("k=\\u12")
    assert "\n" not in str(ei.value)
    assert "Malformed" in str(ei.value)


def test_load_properties_file(tmp_path):
    p = tmp_path / "server.properties"
    p.write_bytes("# Kafka\nlog.dirs=/a,\\\n  /b\nnode.id : 3\nname=caf\xe9\n".encode("latin-1"))
    assert load_properties(str(p)) == {"log.dirs": "/a,/b", "node.id": "3", "name": "café"}
    p.write_text("name=caf\u00e9\n", encoding="utf-8")
    assert load_properties(str(p)) == {"name": "café"}


def _escape(s: str, is_key: bool) -> str:
    out = []
    for i, c in enumerate(s):
        if c == "\\":
            out.append("\\\\")
        elif c in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[c])
        elif c == " " and (is_key or i == 0):
            out.append("\\ ")
        elif c in "=:#!":  # Properties.store escapes these in keys and values
            out.append("\\" + c)
        elif ord(c) < 0x20 or 0x7E < ord(c):
            out.append("\\u%04x" % ord(c))
        else:
            out.append(c)
    return "".join(out)


_text = st.text(alphabet=st.characters(max_codepoint=0xFFFF, exclude_categories=("Cs",)), max_size=20)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_text.filter(bool), _text, max_size=5), st.sampled_from(["=", ":", " ", " = ", "\t: "]))
def test_roundtrip_escaped(props, sep):
    text = "\n".join(_escape(k, True) + sep + _escape(v, False) for k, v in props.items())
    assert parse_properties(text) == props


@settings(max_examples=200, deadline=None)
@given(_text, _text)
def test_continuation_roundtrip(a, b):
    va, vb = _escape(a, False), _escape(b, False)
    # the continuation line's leading whitespace is dropped, so escape the first char of b
    text = "k=" + va + "\\\n   " + (vb if not b.startswith(" ") else "\\ " + _escape(b[1:], False))
    assert parse_properties(text) == {"k": a + b}


# ---------------------------------------------------------------------- typed values


@pytest.mark.parametrize(
    "raw, type_, expected",
    [
        (" 42 ", ConfigType.INT, 42),
        ("+7", ConfigType.INT, 7),
        ("-2147483648", ConfigType.INT, -(2**31)),
        ("9223372036854775807", ConfigType.LONG, 2**63 - 1),
        ("TRUE", ConfigType.BOOLEAN, True),
        (" false\t", ConfigType.BOOLEAN, False),
        ("  x  ", ConfigType.STRING, "x"),
        ("a , b,c", ConfigType.LIST, ["a", "b", "c"]),
        ("   ", ConfigType.LIST, []),
        ("0.25", ConfigType.DOUBLE, 0.25),
        ("1e2", ConfigType.DOUBLE, 100.0),
        ("3d", ConfigType.DOUBLE, 3.0),
    ],
)
def test_parse_value_ok(raw, type_, expected):
    assert parse_value("p", raw, type_) == expected


@pytest.mark.parametrize(
    "raw, type_, rule",
    [
        ("abc", ConfigType.INT, "Not a number of type INT"),
        ("2147483648", ConfigType.INT, "Not a number of type INT"),
        ("1_000", ConfigType.INT, "Not a number of type INT"),
        ("１２", ConfigType.INT, "Not a number of type INT"),  # fullwidth digits: Java rejects? (Python int() accepts)
        ("1.5", ConfigType.LONG, "Not a number of type LONG"),
        ("9223372036854775808", ConfigType.LONG, "Not a number of type LONG"),
        ("", ConfigType.LONG, "Not a number of type LONG"),
        ("yes", ConfigType.BOOLEAN, "Expected value to be either true or false"),
        ("1", ConfigType.BOOLEAN, "Expected value to be either true or false"),
        ("half", ConfigType.DOUBLE, "Not a number of type DOUBLE"),
    ],
)
def test_parse_value_errors(raw, type_, rule):
    with pytest.raises(ConfigError) as ei:
        parse_value("some.prop", raw, type_)
    e = ei.value
    assert (e.name, e.value, e.rule) == ("some.prop", raw, rule)
    assert str(e) == f"Invalid value {raw} for configuration some.prop: {rule}"


def test_config_error_is_one_line():
    e = ConfigError("a.b", "x\ny\r\nz", "must be\nfine")
    s = str(e)
    assert "\n" not in s and "\r" not in s
    assert s.startswith("Invalid value x\\ny") and "a.b" in s
    assert str(ConfigError("a", None, "r")) == "Invalid value null for configuration a: r"


def test_range_and_key():
    k = ConfigKey("log.segment.bytes", ConfigType.INT, 100, Range.at_least(14))
    assert k.attr == "log_segment_bytes"
    assert k.parse("14") == 14
    with pytest.raises(ConfigError, match="Value must be at least 14"):
        k.parse("13")
    with pytest.raises(ConfigError, match="Value must be no more than 1"):
        Range.between(0, 1)("r", 2)
    assert str(Range.at_least(4)) == "[4,...]"
    assert str(Range.between(1, 17)) == "[1,...,17]"


def test_java_trim_and_value_to_string():
    assert java_trim("\x00 a \x1f") == "a"
    assert java_trim("\u00a0a") == "\u00a0a"  # non-ASCII space is not trimmed by String.trim()
    assert value_to_string(True) == "true"
    assert value_to_string(["compact", "delete"]) == "compact,delete"
    assert value_to_string(0.5) == "0.5"
    assert value_to_string(1.0) == "1.0"
    assert value_to_string(None) is None
    assert value_to_string(2**63 - 1) == "9223372036854775807"
