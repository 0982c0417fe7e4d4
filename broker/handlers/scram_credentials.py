"""DescribeUserScramCredentials (key 50) and AlterUserScramCredentials (51), v0, as
Kafka's KafkaApis and ScramControlManager/ScramImage.

Describe needs DESCRIBE on the cluster, Alter needs ALTER (else
CLUSTER_AUTHORIZATION_FAILED). Alter takes salted passwords (the client salts and
hashes; the password never reaches the broker) and stores the salt, stored key and
server key (``storage.scram_credentials``) before answering: a change applies to the
next authentication and survives a crash. One alteration per user per request.
"""

from __future__ import annotations

from broker.security import authorizer as A
from protocol.errors import ErrorCode
from protocol.messages import AlterUserScramCredentialsResponse, DescribeUserScramCredentialsResponse
from protocol.sasl import MAX_ITERATIONS, MIN_ITERATIONS, credential_from_salted

MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_TYPES = {v: k for k, v in MECHANISMS.items()}
_TWICE = "A user credential cannot be altered twice in the same request"


def _check(name: str, mechanism: int):
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in MECHANISMS:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


def handle_alter(ctx, header, request, session=None):
    Result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
    users = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
    if not ctx.authorize(session, A.ALTER, A.CLUSTER, A.CLUSTER_NAME, "AlterUserScramCredentials"):
        return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
            Result(user=u, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), error_message=None)
            for u in dict.fromkeys(users)])
    store = ctx.scram_store
    errors: dict = {}
    deletions: dict = {}
    upserts: dict = {}
    for d in request.deletions:
        if d.name in errors:
            continue
        if deletions.pop(d.name, None) is not None:
            errors[d.name] = (ErrorCode.DUPLICATE_RESOURCE, _TWICE)
            continue
        problem = _check(d.name, d.mechanism)
        if problem is None and store.get(d.name, MECHANISMS[d.mechanism]) is None:
            problem = (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
        if problem is not None:
            errors[d.name] = problem
        else:
            deletions[d.name] = d
    for u in request.upsertions:
        if u.name in errors:
            continue
        if deletions.pop(u.name, None) is not None or upserts.pop(u.name, None) is not None:
            errors[u.name] = (ErrorCode.DUPLICATE_RESOURCE, _TWICE)
            continue
        problem = _check(u.name, u.mechanism)
        if problem is None and u.iterations < MIN_ITERATIONS:
            problem = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif problem is None and u.iterations > MAX_ITERATIONS:
            problem = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        if problem is None and (not u.salt or not u.salted_password):
            problem = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
        if problem is not None:
            errors[u.name] = problem
        else:
            upserts[u.name] = u
    new = {}
    for u in upserts.values():
        mech = MECHANISMS[u.mechanism]
        cred = credential_from_salted(mech, bytes(u.salted_password), bytes(u.salt), u.iterations)
        new[(u.name, mech)] = (cred.salt, cred.stored_key, cred.server_key, cred.iterations)
    if new or deletions:
        store.apply(new, [(d.name, MECHANISMS[d.mechanism]) for d in deletions.values()])
    results = [Result(user=n, error_code=0, error_message=None) for n in list(deletions) + list(upserts)]
    results += [Result(user=n, error_code=int(code), error_message=msg) for n, (code, msg) in errors.items()]
    return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=results)


def handle_describe(ctx, header, request, session=None):
    R = DescribeUserScramCredentialsResponse
    if not ctx.authorize(session, A.DESCRIBE, A.CLUSTER, A.CLUSTER_NAME, "DescribeUserScramCredentials"):
        return R(throttle_time_ms=0, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                 error_message=None, results=[])
    known = ctx.scram_store.users()
    wanted: dict = {}
    if not request.users:
        wanted = {u: False for u in known}
    else:
        for u in request.users:
            wanted[u.name] = u.name in wanted
    results = []
    for user, duplicate in wanted.items():
        if duplicate:
            results.append(R.DescribeUserScramCredentialsResult(
                user=user, error_code=int(ErrorCode.DUPLICATE_RESOURCE), credential_infos=[],
                error_message="Cannot describe SCRAM credentials for the same user twice in a single request: " + user))
        elif user not in known:
            results.append(R.DescribeUserScramCredentialsResult(
                user=user, error_code=int(ErrorCode.RESOURCE_NOT_FOUND), credential_infos=[],
                error_message="Attempt to describe a user credential that does not exist: " + user))
        else:
            results.append(R.DescribeUserScramCredentialsResult(
                user=user, error_code=0, error_message=None, credential_infos=[
                    R.CredentialInfo(mechanism=MECHANISM_TYPES[m], iterations=it) for m, it in known[user]]))
    return R(throttle_time_ms=0, error_code=0, error_message=None, results=results)
