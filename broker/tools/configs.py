"""``chronolog configs``: kafka-configs.sh for topics, brokers, groups, users (SCRAM
credentials and client quotas), clients and ips (client quotas).

* ``--describe`` (DescribeConfigs with synonyms) prints, as Kafka does,
  ``Dynamic configs for topic T are:`` (``All configs ...`` with ``--all``) and one
  ``  name=value sensitive=false synonyms={SOURCE:name=value, ...}`` line per entry.
* ``--alter --add-config k=v,k2=[a,b] --delete-config k`` (IncrementalAlterConfigs SET /
  DELETE) prints ``Completed updating config for topic T.``
* Client quotas (AlterClientQuotas / DescribeClientQuotas): ``--entity-type users
  --entity-name alice [--entity-type clients --entity-name c1]``, ``--entity-default``
  for the default entity, or the shorthands ``--user``, ``--client``, ``--ip``,
  ``--user-defaults``, ``--client-defaults``, ``--ip-defaults``; describe prints
  ``Quota configs for user-principal 'alice', client-id 'c1' are producer_byte_rate=1024.0``.
"""

from __future__ import annotations

from broker.tools import ToolError, UsageError, add_common_args, run_tool

RESOURCE_TYPES = {"topics": 2, "brokers": 4, "groups": 32, "users": 0, "clients": 0, "ips": 0}
QUOTA_ENTITY = {"users": "user", "clients": "client-id", "ips": "ip"}
QUOTA_KEYS = frozenset({"producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"})
IP_QUOTA_KEYS = frozenset({"connection_creation_rate"})
CONFIG_SOURCES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "DYNAMIC_CLIENT_METRICS_CONFIG",
    8: "DYNAMIC_GROUP_CONFIG",
}
OP_SET, OP_DELETE = 0, 1


def parse_add_config(text: str, flag: str = "--add-config") -> dict[str, str]:
    """``k1=v1,k2=[v21,v22]`` -> {k1: v1, k2: "v21,v22"} (Kafka's syntax: square brackets
    group a list value that contains commas)."""
    out: dict[str, str] = {}
    items, depth, cur = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise UsageError(f"{flag}: unbalanced ']' in {text!r}")
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    if depth:
        raise UsageError(f"{flag}: unbalanced '[' in {text!r}")
    items.append(cur)
    for item in items:
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"{flag}: invalid entry {item!r} in {text!r} (expected name=value)")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out[name.strip()] = value
    if not out:
        raise UsageError(f"{flag}: no name=value in {text!r}")
    return out


def parse_delete_config(values: list[str]) -> list[str]:
    out = []
    for v in values:
        out += [x.strip() for x in v.split(",") if x.strip()]
    return out


def register(sub) -> None:
    p = sub.add_parser("configs", help="describe or alter topic and broker configs",
                       description="Describe or alter topic and broker configs (kafka-configs.sh).")
    add_common_args(p)
    p.add_argument("--entity-type", dest="entity_types", action="append", choices=sorted(RESOURCE_TYPES),
                   help="topics, brokers, groups (consumer.* / share.* group configs), users (SCRAM "
                        "credentials, quotas), clients or ips (quotas); users and clients can be given together")
    p.add_argument("--entity-name", dest="entity_names", action="append", metavar="NAME",
                   help="topic name, broker id, group id, user, client id or ip (one per --entity-type)")
    p.add_argument("--entity-default", dest="entity_names", action="append_const", const="",
                   help="brokers: the cluster-wide default; users, clients, ips: the default quota entity")
    for flag, etype in (("--user", "users"), ("--client", "clients"), ("--ip", "ips")):
        p.add_argument(flag, dest="shorthand", action=_Pair, etype=etype, metavar="NAME",
                       help=f"same as --entity-type {etype} --entity-name NAME")
        p.add_argument(f"{flag}-defaults", dest="shorthand", action=_Pair, etype=etype, nargs=0,
                       help=f"same as --entity-type {etype} --entity-default")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="list the configs")
    action.add_argument("--alter", action="store_true", help="change configs")
    p.add_argument("--all", action="store_true", help="--describe: every config, not only dynamic ones")
    p.add_argument("--add-config", metavar="K=V[,K=V]", help="configs to set, e.g. retention.ms=1000,segment.ms=[a,b]")
    p.add_argument("--delete-config", action="append", default=[], metavar="K[,K]", help="configs to remove")
    p.set_defaults(func=lambda args: run_tool("configs", lambda: _run(args)))


import argparse  # noqa: E402


class _Pair(argparse.Action):
    """--user NAME / --user-defaults and the like: an ordered (entity type, name) pair,
    the default entity named ""."""

    def __init__(self, *a, etype: str, **kw):
        self.etype = etype
        super().__init__(*a, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        pairs = list(getattr(namespace, self.dest, None) or [])
        pairs.append((self.etype, values if isinstance(values, str) else ""))
        setattr(namespace, self.dest, pairs)


def _normalize(args) -> None:
    """The --entity-type/--entity-name (and shorthand) lists -> ``args.entity_type``,
    ``entity_name``, ``entity_default`` for single entities, and ``args.quota_entity``
    [(type, name or "" for default or None for any)] for users/clients/ips."""
    types = list(args.entity_types or [])
    names = list(args.entity_names or [])
    shorthand = list(getattr(args, "shorthand", None) or [])
    if shorthand:
        if types or names:
            raise UsageError("give --entity-type/--entity-name or --user/--client/--ip, not both")
        types = [t for t, _ in shorthand]
        names = [n for _, n in shorthand]
    if not types:
        raise UsageError("--entity-type (or --user, --client, --ip) is required")
    if len(names) > len(types):
        raise UsageError("more --entity-name/--entity-default than --entity-type")
    if len(set(types)) != len(types):
        raise UsageError("each --entity-type can be given once")
    if len(types) > 1 and set(types) != {"users", "clients"}:
        raise UsageError("only users and clients can be given together (a user's quota for one client id)")
    args.entity_type = types[0]
    args.quota_entity = [(t, names[i] if i < len(names) else None) for i, t in enumerate(types)]
    args.entity_name = names[0] if names and names[0] else None
    args.entity_default = bool(names) and names[0] == ""


def _entity(args) -> tuple[int, str, str]:
    rtype = RESOURCE_TYPES[args.entity_type]
    if args.entity_type == "users":
        if args.entity_default:
            raise UsageError("--entity-default applies to --entity-type brokers only")
        return rtype, args.entity_name or "", args.entity_name or ""
    if args.entity_default:
        if args.entity_type != "brokers":
            raise UsageError("--entity-default applies to --entity-type brokers only")
        if args.entity_name:
            raise UsageError("give --entity-name or --entity-default, not both")
        return rtype, "", "default"
    if not args.entity_name:
        if args.describe and args.entity_type == "brokers":
            raise UsageError("--entity-type brokers needs --entity-name <broker id> or --entity-default")
        if not args.entity_name:
            raise UsageError(f"--entity-type {args.entity_type} needs --entity-name")
    if args.entity_type == "brokers" and not args.entity_name.isdigit():
        raise UsageError(f"--entity-name: invalid broker id {args.entity_name!r} (expected an integer)")
    return rtype, args.entity_name, args.entity_name


def _run(args) -> int:
    from broker.tools.client import Client

    _normalize(args)
    if args.describe and (args.add_config or args.delete_config):
        raise UsageError("--add-config/--delete-config need --alter")
    if args.entity_type in QUOTA_ENTITY:
        return _quota_or_scram(args)
    rtype, rname, label = _entity(args)
    if args.describe and (args.add_config or args.delete_config):
        raise UsageError("--add-config/--delete-config need --alter")
    if args.alter:
        add = parse_add_config(args.add_config) if args.add_config else {}
        delete = parse_delete_config(args.delete_config)
        if not add and not delete:
            raise UsageError("--alter needs --add-config and/or --delete-config")
        both = set(add) & set(delete)
        if both:
            raise UsageError(f"--add-config and --delete-config both name {', '.join(sorted(both))}")
    if args.entity_type == "users":
        with Client.from_args(args) as client:
            return _users(client, args, add if args.alter else {}, delete if args.alter else [])
    with Client.from_args(args) as client:
        if args.describe:
            return _describe(client, args, rtype, rname, label)
        return _alter(client, args, rtype, rname, label, add, delete)


SCRAM = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
SCRAM_NAMES = {v: k for k, v in SCRAM.items()}


def _users(client, args, add: dict, delete: list) -> int:
    """SCRAM credentials (AlterUserScramCredentials / DescribeUserScramCredentials), as
    kafka-configs.sh --entity-type users: the password is salted and hashed here, the
    broker never sees it."""
    import os

    from broker.tools.client import error_name
    from protocol.messages import AlterUserScramCredentialsRequest as Alter
    from protocol.messages import DescribeUserScramCredentialsRequest as Describe
    from protocol.sasl import MIN_ITERATIONS, salted_password

    user = args.entity_name
    conn = client.any()
    if args.describe:
        _, resp = conn.request(Describe(users=[Describe.UserName(name=user)] if user else None))
        if resp.error_code:
            raise ToolError(f"--describe: {error_name(resp.error_code)}")
        for r in resp.results:
            if r.error_code:
                if r.error_code == 91 and user:  # RESOURCE_NOT_FOUND: nothing to show
                    continue
                raise ToolError(f"--entity-name {r.user}: {error_name(r.error_code)}: {r.error_message}")
            creds = ", ".join(f"{SCRAM_NAMES.get(c.mechanism, c.mechanism)}=iterations={c.iterations}"
                              for c in r.credential_infos)
            print(f"SCRAM credential configs for user-principal '{r.user}' are {creds}")
        return 0
    if not user:
        raise UsageError("--entity-type users --alter needs --entity-name")
    upserts, deletions = [], []
    for mech, spec in add.items():
        if mech not in SCRAM:
            raise UsageError(f"--add-config: {mech} is not SCRAM-SHA-256 or SCRAM-SHA-512")
        fields = dict(f.split("=", 1) for f in spec.split(",") if "=" in f)
        if "password" not in fields:
            raise UsageError(f"--add-config {mech}=[iterations=N,password=...]: password is missing")
        try:
            iterations = int(fields.get("iterations", MIN_ITERATIONS))
        except ValueError:
            raise UsageError(f"--add-config {mech}: iterations must be an integer") from None
        salt = os.urandom(32)
        upserts.append(Alter.ScramCredentialUpsertion(
            name=user, mechanism=SCRAM[mech], iterations=iterations, salt=salt,
            salted_password=salted_password(mech, fields["password"], salt, iterations)))
    for mech in delete:
        if mech not in SCRAM:
            raise UsageError(f"--delete-config: {mech} is not SCRAM-SHA-256 or SCRAM-SHA-512")
        deletions.append(Alter.ScramCredentialDeletion(name=user, mechanism=SCRAM[mech]))
    # Kafka refuses two alterations of one user in one request: one request each
    for one in [Alter(deletions=[d], upsertions=[]) for d in deletions] + \
               [Alter(deletions=[], upsertions=[u]) for u in upserts]:
        _, resp = conn.request(one)
        for r in resp.results:
            if r.error_code:
                raise ToolError(f"--alter --entity-name {user}: {error_name(r.error_code)}"
                                f"{': ' + r.error_message if r.error_message else ''}")
    print(f"Completed updating config for user {user}.")
    return 0


def _conn_for(client, rtype: int, rname: str):
    if rtype == 4 and rname:  # broker configs are answered by that broker
        return client.node(int(rname))
    return client.any()


def _describe(client, args, rtype, rname, label) -> int:
    from broker.tools.client import error_name
    from protocol.messages import DescribeConfigsRequest

    conn = _conn_for(client, rtype, rname)
    v = conn.version_for(32)
    req = DescribeConfigsRequest(
        resources=[DescribeConfigsRequest.DescribeConfigsResource(resource_type=rtype, resource_name=rname,
                                                                  configuration_keys=None)],
        include_synonyms=True)
    _, resp = conn.request(req, v)
    res = resp.results[0]
    if res.error_code:
        detail = f": {res.error_message}" if res.error_message else ""
        raise ToolError(f"--entity-name {label}: {error_name(res.error_code)}{detail}")
    kind = args.entity_type[:-1]
    dynamic_source = {2: 1, 4: 2 if rname else 3, 32: 8}[rtype]
    entries = res.configs
    if not args.all:
        entries = [e for e in entries if (e.config_source == dynamic_source if v >= 1 else not e.is_default)]
    if not rname:
        print(f"Default configs for {args.entity_type} in the cluster are:")
    else:
        print(f"{'All' if args.all else 'Dynamic'} configs for {kind} {rname} are:")
    for e in sorted(entries, key=lambda e: e.name):
        value = "null" if e.is_sensitive or e.value is None else e.value
        syns = ", ".join(f"{CONFIG_SOURCES.get(s.source, s.source)}:{s.name}="
                         f"{'null' if e.is_sensitive or s.value is None else s.value}"
                         for s in getattr(e, "synonyms", []) or [])
        print(f"  {e.name}={value} sensitive={'true' if e.is_sensitive else 'false'} synonyms={{{syns}}}")
    return 0


def _alter(client, args, rtype, rname, label, add: dict[str, str], delete: list[str]) -> int:
    from broker.tools.client import error_name
    from protocol.messages import IncrementalAlterConfigsRequest as Req

    if rtype == 2:
        client.topic_partitions([rname])  # a clear error for an unknown topic
    conn = _conn_for(client, rtype, rname)
    v = conn.version_for(44)
    configs = [Req.AlterableConfig(name=k, config_operation=OP_SET, value=val) for k, val in add.items()]
    configs += [Req.AlterableConfig(name=k, config_operation=OP_DELETE, value=None) for k in delete]
    req = Req(resources=[Req.AlterConfigsResource(resource_type=rtype, resource_name=rname, configs=configs)],
              validate_only=False)
    _, resp = conn.request(req, v)
    for r in resp.responses:
        if r.error_code:
            detail = f": {r.error_message}" if r.error_message else ""
            raise ToolError(f"--alter --entity-name {label}: {error_name(r.error_code)}{detail}")
    if rname:
        print(f"Completed updating config for {args.entity_type[:-1]} {rname}.")
    else:
        print(f"Completed updating default config for {args.entity_type} in the cluster.")
    return 0


# ------------------------------------------------------------------------------ client quotas
def _java_double(value: float) -> str:
    """Java's Double.toString, as kafka-configs.sh prints quota values (1024.0, 1.048576E7)."""
    from decimal import Decimal

    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        text = repr(float(value))
        return text if "e" not in text else format(value, "f")
    d = Decimal(repr(float(value)))
    sign, digits, _ = d.as_tuple()
    digits = "".join(map(str, digits)).rstrip("0") or "0"
    return f"{'-' if sign else ''}{digits[0]}.{digits[1:] or '0'}E{d.adjusted()}"


def _quota_or_scram(args) -> int:
    from broker.tools.client import Client

    add = parse_add_config(args.add_config) if args.alter and args.add_config else {}
    delete = parse_delete_config(args.delete_config) if args.alter else []
    if args.alter:
        if not add and not delete:
            raise UsageError("--alter needs --add-config and/or --delete-config")
        both = set(add) & set(delete)
        if both:
            raise UsageError(f"--add-config and --delete-config both name {', '.join(sorted(both))}")
    types = [t for t, _ in args.quota_entity]
    keys = set(add) | set(delete)
    allowed = IP_QUOTA_KEYS if types == ["ips"] else QUOTA_KEYS
    scram = {k for k in keys if k in SCRAM}
    unknown = keys - allowed - scram
    if args.alter:
        if unknown or (scram and types != ["users"]):
            what = "connection quota" if types == ["ips"] else (
                "quota and SCRAM credential" if types == ["users"] else "quota")
            raise UsageError(f"Only {what} configs can be changed for '{args.entity_type}'. Unexpected config "
                             f"names: {', '.join(sorted(unknown | (scram if types != ['users'] else set())))}")
        if scram:
            if keys - scram:
                raise UsageError("Cannot alter both quota and SCRAM credential configs simultaneously for 'users'.")
            if args.entity_default or not args.entity_name:
                raise UsageError("--entity-default (or --user-defaults) cannot be used with SCRAM credentials")
            with Client.from_args(args) as client:
                return _users(client, args, add, delete)
        if any(n is None for _, n in args.quota_entity):
            raise UsageError("--alter needs --entity-name or --entity-default for every --entity-type")
        with Client.from_args(args) as client:
            return _alter_quotas(client, args, add, delete)
    with Client.from_args(args) as client:
        _describe_quotas(client, args)
        # kafka-configs.sh also lists SCRAM credentials when describing users alone
        if types == ["users"] and not args.entity_default:
            _users(client, args, {}, [])
    return 0


def _alter_quotas(client, args, add: dict, delete: list) -> int:
    from broker.tools.client import error_name
    from protocol.messages import AlterClientQuotasRequest as Req

    ops = []
    for key, value in add.items():
        try:
            number = float(value)
        except ValueError:
            raise UsageError(f"Cannot parse quota configuration value for {key}: {value}") from None
        ops.append(Req.OpData(key=key, value=number, remove=False))
    ops += [Req.OpData(key=key, value=0.0, remove=True) for key in delete]
    entity = [Req.EntityData(entity_type=QUOTA_ENTITY[t], entity_name=n or None) for t, n in args.quota_entity]
    conn = client.any()
    _, resp = conn.request(Req(entries=[Req.EntryData(entity=entity, ops=ops)], validate_only=False))
    for r in resp.entries:
        if r.error_code:
            raise ToolError(f"--alter: {error_name(r.error_code)}{': ' + r.error_message if r.error_message else ''}")
    first_type, first_name = args.quota_entity[0]
    if first_name:
        print(f"Completed updating config for {first_type[:-1]} {first_name}.")
    else:
        print(f"Completed updating default config for {first_type} in the cluster.")
    return 0


def _describe_quotas(client, args) -> None:
    from broker.tools.client import error_name
    from protocol.messages import DescribeClientQuotasRequest as Req

    components = []
    for etype, name in args.quota_entity:
        if name is None:  # every entity of the type
            components.append(Req.ComponentData(entity_type=QUOTA_ENTITY[etype], match_type=2, match=None))
        elif name == "":
            components.append(Req.ComponentData(entity_type=QUOTA_ENTITY[etype], match_type=1, match=None))
        else:
            components.append(Req.ComponentData(entity_type=QUOTA_ENTITY[etype], match_type=0, match=name))
    _, resp = client.any().request(Req(components=components, strict=True))
    if resp.error_code:
        raise ToolError(f"--describe: {error_name(resp.error_code)}{': ' + resp.error_message if resp.error_message else ''}")
    label = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
    for entry in resp.entries or []:
        names = {e.entity_type: e.entity_name for e in entry.entity}
        parts = [f"{label[t]} '{names[t]}'" if names[t] is not None else f"the default {label[t]}"
                 for t in ("user", "client-id", "ip") if t in names]
        values = ", ".join(f"{v.key}={_java_double(v.value)}" for v in entry.values)
        print(f"Quota configs for {', '.join(parts)} are {values}")
