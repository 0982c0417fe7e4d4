"""``chronolog configs``: kafka-configs.sh for topics, brokers, groups and users (SCRAM).

* ``--describe`` (DescribeConfigs with synonyms) prints, as Kafka does,
  ``Dynamic configs for topic T are:`` (``All configs ...`` with ``--all``) and one
  ``  name=value sensitive=false synonyms={SOURCE:name=value, ...}`` line per entry.
* ``--alter --add-config k=v,k2=[a,b] --delete-config k`` (IncrementalAlterConfigs SET /
  DELETE) prints ``Completed updating config for topic T.``
"""

from __future__ import annotations

from broker.tools import ToolError, UsageError, add_common_args, run_tool

RESOURCE_TYPES = {"topics": 2, "brokers": 4, "groups": 32, "users": 0}  # users: SCRAM credentials
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
    p.add_argument("--entity-type", required=True, choices=sorted(RESOURCE_TYPES),
                   help="topics, brokers, groups (consumer.* / share.* group configs) or users (SCRAM)")
    p.add_argument("--entity-name", metavar="NAME", help="topic name, broker id, group id or user")
    p.add_argument("--entity-default", action="store_true", help="brokers: the cluster-wide default")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="list the configs")
    action.add_argument("--alter", action="store_true", help="change configs")
    p.add_argument("--all", action="store_true", help="--describe: every config, not only dynamic ones")
    p.add_argument("--add-config", metavar="K=V[,K=V]", help="configs to set, e.g. retention.ms=1000,segment.ms=[a,b]")
    p.add_argument("--delete-config", action="append", default=[], metavar="K[,K]", help="configs to remove")
    p.set_defaults(func=lambda args: run_tool("configs", lambda: _run(args)))


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
