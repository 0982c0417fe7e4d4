"""``chronolog acls``: kafka-acls.sh's common flags over CreateAcls, DescribeAcls and
DeleteAcls.

    chronolog acls --bootstrap-server H:P [--command-config FILE]
        --add | --remove | --list
        [--allow-principal P ...] [--deny-principal P ...] [--allow-host H ...] [--deny-host H ...]
        [--operation Read ...] [--producer] [--consumer]
        [--topic T ...] [--group G ...] [--cluster] [--transactional-id X ...]
        [--resource-pattern-type literal|prefixed|match|any] [--principal P] [--force]

Output follows kafka-acls.sh (``Current ACLs for resource `ResourcePattern(...)`:``).
"""

from __future__ import annotations

import itertools

from broker.security import authorizer as A
from broker.tools import ToolError, UsageError, add_common_args, run_tool

RESOURCE = {"TOPIC": A.TOPIC, "GROUP": A.GROUP, "CLUSTER": A.CLUSTER, "TRANSACTIONAL_ID": A.TRANSACTIONAL_ID,
            "DELEGATION_TOKEN": A.DELEGATION_TOKEN}
RESOURCE_NAMES = {v: k for k, v in RESOURCE.items()}
PATTERN_NAMES = {A.ANY_PATTERN: "ANY", A.MATCH: "MATCH", A.LITERAL: "LITERAL", A.PREFIXED: "PREFIXED"}
PATTERN = {n.lower(): c for c, n in PATTERN_NAMES.items()}
OP_NAMES = {A.ALL: "ALL", A.READ: "READ", A.WRITE: "WRITE", A.CREATE: "CREATE", A.DELETE: "DELETE",
            A.ALTER: "ALTER", A.DESCRIBE: "DESCRIBE", A.CLUSTER_ACTION: "CLUSTER_ACTION",
            A.DESCRIBE_CONFIGS: "DESCRIBE_CONFIGS", A.ALTER_CONFIGS: "ALTER_CONFIGS",
            A.IDEMPOTENT_WRITE: "IDEMPOTENT_WRITE", A.CREATE_TOKENS: "CREATE_TOKENS",
            A.DESCRIBE_TOKENS: "DESCRIBE_TOKENS"}
OPERATIONS = {n.replace("_", "").lower(): c for c, n in OP_NAMES.items()}  # "idempotentwrite" -> 12
ALLOW, DENY = A.ALLOW, A.DENY
PERM_NAMES = {ALLOW: "ALLOW", DENY: "DENY"}


def register(sub) -> None:
    p = sub.add_parser("acls", help="add, remove or list ACLs",
                       description="Add, remove or list ACLs (kafka-acls.sh).")
    add_common_args(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add the ACLs")
    action.add_argument("--remove", action="store_true", help="remove the matching ACLs")
    action.add_argument("--list", action="store_true", help="list the matching ACLs")
    for flag in ("--allow-principal", "--deny-principal", "--allow-host", "--deny-host", "--operation", "--topic",
                 "--group", "--transactional-id", "--delegation-token"):
        p.add_argument(flag, action="append", default=[], metavar="VALUE")
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--principal", help="--list: only ACLs of this principal")
    p.add_argument("--resource-pattern-type", default=None, choices=sorted(PATTERN), type=str.lower)
    p.add_argument("--producer", action="store_true", help="WRITE, DESCRIBE, CREATE on --topic")
    p.add_argument("--consumer", action="store_true", help="READ, DESCRIBE on --topic and READ on --group")
    p.add_argument("--force", action="store_true", help="do not ask (Chronolog never asks)")
    p.set_defaults(func=lambda args: run_tool("acls", lambda: _run(args)))


def _resources(args) -> list[tuple[int, str]]:
    out = [(RESOURCE["TOPIC"], t) for t in args.topic] + [(RESOURCE["GROUP"], g) for g in args.group]
    out += [(RESOURCE["TRANSACTIONAL_ID"], t) for t in args.transactional_id]
    out += [(RESOURCE["DELEGATION_TOKEN"], t) for t in args.delegation_token]
    if args.cluster:
        out.append((RESOURCE["CLUSTER"], "kafka-cluster"))
    return out


def _operations(args, rtype: int) -> list[int]:
    ops = []
    for name in args.operation:
        key = name.replace("_", "").replace("-", "").lower()
        if key not in OPERATIONS:
            raise UsageError(f"--operation: unknown operation {name!r} (one of Read, Write, Create, Delete, Alter, "
                             "Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, All)")
        ops.append(OPERATIONS[key])
    if args.producer and rtype == RESOURCE["TOPIC"]:
        ops += [OPERATIONS["write"], OPERATIONS["describe"], OPERATIONS["create"]]
    if args.consumer and rtype == RESOURCE["TOPIC"]:
        ops += [OPERATIONS["read"], OPERATIONS["describe"]]
    if args.consumer and rtype == RESOURCE["GROUP"]:
        ops += [OPERATIONS["read"]]
    return list(dict.fromkeys(ops))


def _entries(args, rtype: int) -> list[tuple[str, str, int, int]]:
    """(principal, host, operation, permission) for --add/--remove."""
    out = []
    for principals, hosts, perm in ((args.allow_principal, args.allow_host, ALLOW),
                                    (args.deny_principal, args.deny_host, DENY)):
        for principal in principals:
            if ":" not in principal:
                raise UsageError(f"principal {principal!r} must look like User:name")
            for host, op in itertools.product(hosts or ["*"], _operations(args, rtype)):
                out.append((principal, host, op, perm))
    return out


def _pattern(rtype, name, ptype) -> str:
    return (f"ResourcePattern(resourceType={RESOURCE_NAMES.get(rtype, rtype)}, name={name}, "
            f"patternType={PATTERN_NAMES.get(ptype, ptype)})")


def _entry(principal, host, op, perm) -> str:
    return (f"(principal={principal}, host={host}, operation={OP_NAMES.get(op, op)}, "
            f"permissionType={PERM_NAMES.get(perm, perm)})")


def _check_error(code, message, what) -> None:
    if code:
        from broker.tools.client import error_name

        raise ToolError(f"{what}: {error_name(code)}{': ' + message if message else ''}")


def _list(conn, rtype, name, ptype, principal=None) -> dict:
    from protocol.messages import DescribeAclsRequest

    _, resp = conn.request(DescribeAclsRequest(
        resource_type_filter=rtype, resource_name_filter=name, pattern_type_filter=ptype,
        principal_filter=principal, host_filter=None, operation=A.ANY_OP, permission_type=A.ANY_PERMISSION))
    _check_error(resp.error_code, resp.error_message, "DescribeAcls")
    out: dict = {}
    for r in resp.resources:
        out.setdefault((r.resource_type, r.resource_name, r.pattern_type), []).extend(
            (a.principal, a.host, a.operation, a.permission_type) for a in r.acls)
    return out


def _print(groups: dict) -> None:
    for (rtype, name, ptype), entries in groups.items():
        print(f"Current ACLs for resource `{_pattern(rtype, name, ptype)}`: ")
        for e in entries:
            print(f" \t{_entry(*e)} ")
        print()


def _run(args) -> int:
    from broker.tools.client import Client
    from protocol.messages import CreateAclsRequest, DeleteAclsRequest

    resources = _resources(args)
    if (args.producer or args.consumer) and not args.topic:
        raise UsageError("--producer/--consumer need --topic")
    if args.consumer and not args.group and args.add:
        raise UsageError("--consumer needs --group")
    if (args.add or args.remove) and not resources:
        raise UsageError("give a resource: --topic, --group, --cluster, --transactional-id or --delegation-token")
    if args.add and not (args.allow_principal or args.deny_principal):
        raise UsageError("--add needs --allow-principal and/or --deny-principal")
    ptype_name = args.resource_pattern_type or ("any" if args.list else "literal")
    ptype = PATTERN[ptype_name]
    if args.add and ptype not in (A.LITERAL, A.PREFIXED):
        raise UsageError("--add needs --resource-pattern-type literal or prefixed")
    with Client.from_args(args) as client:
        conn = client.any()
        if args.list:
            groups = {}
            for rtype, name in resources or [(A.ANY_TYPE, None)]:
                groups.update(_list(conn, rtype, name, ptype, args.principal))
            _print(groups)
            return 0
        if args.add:
            creations = []
            for rtype, name in resources:
                entries = _entries(args, rtype)
                if not entries:
                    raise UsageError("--add needs --operation (or --producer / --consumer)")
                print(f"Adding ACLs for resource `{_pattern(rtype, name, ptype)}`: ")
                for e in entries:
                    print(f" \t{_entry(*e)} ")
                    creations.append(CreateAclsRequest.AclCreation(
                        resource_type=rtype, resource_name=name, resource_pattern_type=ptype,
                        principal=e[0], host=e[1], operation=e[2], permission_type=e[3]))
                print()
            _, resp = conn.request(CreateAclsRequest(creations=creations))
            for r in resp.results:
                _check_error(r.error_code, r.error_message, "CreateAcls")
        else:
            filters = []
            for rtype, name in resources:
                entries = _entries(args, rtype) or [(None, None, A.ANY_OP, A.ANY_PERMISSION)]
                print(f"Removing ACLs for resource `{_pattern(rtype, name, ptype)}`")
                for principal, host, op, perm in entries:
                    filters.append(DeleteAclsRequest.DeleteAclsFilter(
                        resource_type_filter=rtype, resource_name_filter=name, pattern_type_filter=ptype,
                        principal_filter=principal, host_filter=host, operation=op, permission_type=perm))
            _, resp = conn.request(DeleteAclsRequest(filters=filters))
            for r in resp.filter_results:
                _check_error(r.error_code, r.error_message, "DeleteAcls")
        groups = {}
        for rtype, name in resources:
            groups.update(_list(conn, rtype, name, ptype if ptype in (A.LITERAL, A.PREFIXED) else A.ANY_PATTERN))
        _print(groups)
    return 0
