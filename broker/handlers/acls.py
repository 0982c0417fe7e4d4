"""CreateAcls (key 30), DescribeAcls (29), DeleteAcls (31), v0-3, as Kafka's AclApis.

All three need the CLUSTER resource: ALTER to create or delete, DESCRIBE to list
(else CLUSTER_AUTHORIZATION_FAILED for the whole request). Without an authorizer
(``authorizer.class.name`` empty) they answer SECURITY_DISABLED. ACLs are stored by
``storage.acl_store`` before the answer and apply to the next request.
"""

from __future__ import annotations

from broker.security import authorizer as A
from protocol.errors import ErrorCode
from protocol.messages import (
    CreateAclsResponse,
    DeleteAclsResponse,
    DescribeAclsResponse,
)
from storage.acl_store import OPERATIONS, PATTERN_TYPES, PERMISSIONS, RESOURCE_TYPES, AclBinding

_DISABLED = "No Authorizer is configured on the broker"


def _creation_error(c, version: int):
    ptype = c.resource_pattern_type if version >= 1 else A.LITERAL
    if c.resource_type not in RESOURCE_TYPES:
        return f"Invalid resourceType {c.resource_type}"
    if ptype not in PATTERN_TYPES:
        return f"Invalid patternType {ptype}"
    if c.operation not in OPERATIONS:
        return f"Invalid operation {c.operation}"
    if c.permission_type not in PERMISSIONS:
        return f"Invalid permissionType {c.permission_type}"
    if c.resource_type == A.CLUSTER and c.resource_name != A.CLUSTER_NAME:
        return "The only valid name for the CLUSTER resource is " + A.CLUSTER_NAME
    if not c.resource_name:
        return "Invalid empty resource name"
    kind, sep, name = (c.principal or "").partition(":")
    if not sep or not kind or not name:
        return f"expected a string in format principalType:principalName but got {c.principal}"
    if not c.host:
        return "Invalid empty host"
    return None


def handle_create(ctx, header, request, session=None):
    if not ctx.authorize(session, A.ALTER, A.CLUSTER, A.CLUSTER_NAME, "CreateAcls"):
        err = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        return CreateAclsResponse(throttle_time_ms=0, results=[
            CreateAclsResponse.AclCreationResult(error_code=err, error_message=None) for _ in request.creations])
    if ctx.authorizer is None:
        return CreateAclsResponse(throttle_time_ms=0, results=[
            CreateAclsResponse.AclCreationResult(error_code=int(ErrorCode.SECURITY_DISABLED),
                                                 error_message="No Authorizer is configured.")
            for _ in request.creations])
    results, add = [], []
    for c in request.creations:
        msg = _creation_error(c, header.api_version)
        if msg is not None:
            results.append(CreateAclsResponse.AclCreationResult(error_code=int(ErrorCode.INVALID_REQUEST),
                                                                error_message=msg))
            continue
        add.append(AclBinding(c.resource_type, c.resource_name,
                              c.resource_pattern_type if header.api_version >= 1 else A.LITERAL,
                              c.principal, c.host, c.operation, c.permission_type))
        results.append(CreateAclsResponse.AclCreationResult(error_code=0, error_message=None))
    if add:
        ctx.authorizer.store.change(add=add)
    return CreateAclsResponse(throttle_time_ms=0, results=results)


def handle_describe(ctx, header, request, session=None):
    if not ctx.authorize(session, A.DESCRIBE, A.CLUSTER, A.CLUSTER_NAME, "DescribeAcls"):
        return DescribeAclsResponse(throttle_time_ms=0, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                                    error_message=None, resources=[])
    if ctx.authorizer is None:
        return DescribeAclsResponse(throttle_time_ms=0, error_code=int(ErrorCode.SECURITY_DISABLED),
                                    error_message=_DISABLED, resources=[])
    problem = A.filter_error(request)
    if problem is not None:
        return DescribeAclsResponse(throttle_time_ms=0, error_code=int(ErrorCode.INVALID_REQUEST),
                                    error_message=problem, resources=[])
    groups: dict = {}
    for acl in sorted(ctx.authorizer.store.all()):
        if A.filter_matches(request, acl):
            groups.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(acl)
    resources = [
        DescribeAclsResponse.DescribeAclsResource(
            resource_type=rt, resource_name=name, pattern_type=pt,
            acls=[DescribeAclsResponse.AclDescription(
                principal=a.principal, host=a.host, operation=a.operation, permission_type=a.permission)
                for a in acls])
        for (rt, name, pt), acls in groups.items()
    ]
    return DescribeAclsResponse(throttle_time_ms=0, error_code=0, error_message=None, resources=resources)


def handle_delete(ctx, header, request, session=None):
    Result = DeleteAclsResponse.DeleteAclsFilterResult
    Matching = DeleteAclsResponse.DeleteAclsMatchingAcl
    if not ctx.authorize(session, A.ALTER, A.CLUSTER, A.CLUSTER_NAME, "DeleteAcls"):
        err = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
            Result(error_code=err, error_message=None, matching_acls=[]) for _ in request.filters])
    if ctx.authorizer is None:
        return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
            Result(error_code=int(ErrorCode.SECURITY_DISABLED), error_message="No Authorizer is configured.",
                   matching_acls=[]) for _ in request.filters])
    acls = ctx.authorizer.store.all()
    results, remove = [], set()
    for f in request.filters:
        problem = A.filter_error(f)
        if problem is not None:
            results.append(Result(error_code=int(ErrorCode.INVALID_REQUEST), error_message=problem, matching_acls=[]))
            continue
        matched = sorted(a for a in acls if A.filter_matches(f, a))
        remove.update(matched)
        results.append(Result(error_code=0, error_message=None, matching_acls=[
            Matching(error_code=0, error_message=None, resource_type=a.resource_type, resource_name=a.resource_name,
                     pattern_type=a.pattern_type, principal=a.principal, host=a.host, operation=a.operation,
                     permission_type=a.permission) for a in matched]))
    if remove:
        ctx.authorizer.store.change(remove=remove)
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=results)
