"""FindCoordinator (key 10), v0-4: this broker coordinates every group and every
transactional id.

Key type 0 (group) and 1 (transaction) answer this broker's node id and the host/port
of the listener the client came through (v4: one entry per key of
``coordinator_keys``), after DESCRIBE on the group / transactional id. Any other key
type (2 = share groups) answers INVALID_REQUEST, as KafkaApis.getCoordinator does for
FindCoordinator below v6. Both coordinators are loaded (``__consumer_offsets`` and
``__transaction_state`` replayed) before the listener opens; before that the answer
would be COORDINATOR_NOT_AVAILABLE.
"""

from protocol.errors import ErrorCode
from protocol.messages import FindCoordinatorResponse

from broker.security import authorizer as A

def _answer(ctx, key: str, key_type: int, session=None):
    """(error_code, error_message, node_id, host, port)"""
    if key_type == 0 and not ctx.authorize(session, A.DESCRIBE, A.GROUP, key, "FindCoordinator"):
        return int(ErrorCode.GROUP_AUTHORIZATION_FAILED), None, -1, "", -1
    if key_type == 1 and not ctx.authorize(session, A.DESCRIBE, A.TRANSACTIONAL_ID, key, "FindCoordinator"):
        return int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), None, -1, "", -1
    if key_type in (0, 1):
        if (ctx.group_coordinator if key_type == 0 else ctx.txn_coordinator) is None:
            what = "group" if key_type == 0 else "transaction"
            return int(ErrorCode.COORDINATOR_NOT_AVAILABLE), f"the {what} coordinator is not loaded", -1, "", -1
        host, port = ctx.endpoint(session)  # the listener the client came through
        return 0, None, ctx.node_id, host, port
    return int(ErrorCode.INVALID_REQUEST), f"unknown coordinator key type {key_type}", -1, "", -1


def handle(ctx, header, request, session=None):
    if header.api_version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            code, msg, node, host, port = _answer(ctx, key, request.key_type, session)
            coordinators.append(FindCoordinatorResponse.Coordinator(
                key=key, node_id=node, host=host, port=port, error_code=code, error_message=msg))
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)
    key_type = request.key_type if header.api_version >= 1 else 0
    code, msg, node, host, port = _answer(ctx, request.key, key_type, session)
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=code, error_message=msg,
                                   node_id=node, host=host, port=port)
