"""Kafka's ``sasl.jaas.config`` text: ``<LoginModule class> <flag> key="value" ... ;``.

Only what a broker reads from it matters here: the PLAIN users (``user_<name>="password"``
options of ``PlainLoginModule``) and the ``unsecuredValidator*`` options of
``OAuthBearerLoginModule`` (Kafka's default check of unsecured JWTs). Values are quoted
strings (``\\`` escapes the next character) or bare tokens. A malformed text raises
ConfigError naming the property, never showing its value (it holds passwords).
"""

from __future__ import annotations

import re

from config.properties import ConfigError

FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(r'\s*(?:"((?:\\.|[^"\\])*)"|([^\s=;"]+)|(=)|(;))', re.S)


def parse_jaas(prop: str, text: str) -> list[tuple[str, str, dict[str, str]]]:
    """``[(login module class, flag, {option: value})]``."""
    tokens = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            if text[pos:].strip() == "":
                break
            raise ConfigError(prop, "[hidden]", f"JAAS config is malformed near character {pos}")
        pos = m.end()
        if m.group(1) is not None:
            tokens.append(("str", re.sub(r"\\(.)", r"\1", m.group(1))))
        elif m.group(2) is not None:
            tokens.append(("word", m.group(2)))
        elif m.group(3):
            tokens.append(("=", "="))
        else:
            tokens.append((";", ";"))
    modules = []
    i = 0
    while i < len(tokens):
        if tokens[i][0] != "word" or i + 1 >= len(tokens) or tokens[i + 1][1].lower() not in FLAGS:
            raise ConfigError(prop, "[hidden]", "JAAS config entry must be '<LoginModule> <flag> [key=value ...];' "
                              "with flag one of " + ", ".join(FLAGS))
        module, flag = tokens[i][1], tokens[i + 1][1].lower()
        i += 2
        options = {}
        while i < len(tokens) and tokens[i][0] != ";":
            if i + 2 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][0] != "=" or tokens[i + 2][0] not in ("str", "word"):
                raise ConfigError(prop, "[hidden]", f"JAAS config option {i} of {module} is not key=value")
            options[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise ConfigError(prop, "[hidden]", "JAAS config entry must end with ';'")
        i += 1
        modules.append((module, flag, options))
    if not modules:
        raise ConfigError(prop, "[hidden]", "JAAS config has no login module")
    return modules


def plain_users(prop: str, text: str | None) -> dict[str, str]:
    """``{user: password}`` from the ``user_<name>`` options (PlainServerCallbackHandler)."""
    if not text:
        return {}
    users = {}
    for _module, _flag, options in parse_jaas(prop, text):
        for key, value in options.items():
            if key.startswith("user_"):
                users[key[5:]] = value
    return users


def oauth_validator_options(prop: str, text: str | None) -> dict:
    """protocol.sasl.OAuthBearerServer's keyword arguments from the options Kafka's
    OAuthBearerUnsecuredValidatorCallbackHandler reads: ``unsecuredValidatorPrincipalClaimName``
    (default ``sub``), ``unsecuredValidatorScopeClaimName`` (``scope``),
    ``unsecuredValidatorRequiredScope`` (space separated) and
    ``unsecuredValidatorAllowableClockSkewMs`` (a non-negative integer, 0). No JAAS text:
    the defaults."""
    options: dict[str, str] = {}
    if text:
        for _module, _flag, opts in parse_jaas(prop, text):
            options.update(opts)
    skew_text = (options.get("unsecuredValidatorAllowableClockSkewMs") or "").strip()
    try:
        skew = int(skew_text) if skew_text else 0
    except ValueError:
        skew = -1
    if skew < 0:
        raise ConfigError(prop, "[hidden]", "unsecuredValidatorAllowableClockSkewMs must be a non-negative "
                          f"integer of milliseconds, not {skew_text[:32]!r}")
    return {"principal_claim": (options.get("unsecuredValidatorPrincipalClaimName") or "").strip() or "sub",
            "scope_claim": (options.get("unsecuredValidatorScopeClaimName") or "").strip() or "scope",
            "required_scope": tuple((options.get("unsecuredValidatorRequiredScope") or "").split()),
            "clock_skew_ms": skew}
