"""FindCoordinator (key 10), v0-4: there is no group or transaction coordinator yet.

It is advertised anyway because librdkafka infers broker features from the API list:
without FindCoordinator it assumes a pre-0.9 broker and, for one, refuses to produce lz4
("Broker does not support compression type lz4"). The answer is the one Kafka gives while
its coordinator is loading or absent: COORDINATOR_NOT_AVAILABLE, so clients retry and
consumers that only assign() partitions work; group membership and committed offsets
come with the coordinator.
"""

from protocol.errors import ErrorCode
from protocol.messages import FindCoordinatorResponse

_CODE = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
_MESSAGE = "Chronolog has no group or transaction coordinator yet"


def handle(ctx, header, request):
    if header.api_version >= 4:
        return FindCoordinatorResponse(
            throttle_time_ms=0,
            coordinators=[
                FindCoordinatorResponse.Coordinator(
                    key=key, node_id=-1, host="", port=-1, error_code=_CODE, error_message=_MESSAGE
                )
                for key in request.coordinator_keys
            ],
        )
    return FindCoordinatorResponse(
        throttle_time_ms=0, error_code=_CODE, error_message=_MESSAGE, node_id=-1, host="", port=-1
    )
