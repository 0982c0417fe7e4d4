"""ApiVersions (key 18), v0-4 (v4 differs from v3 only in allowing feature min version 0, KAFKA-17011).

The v3 response carries no tagged fields: librdkafka before 2.2 (Debian's kcat) fails
to parse SupportedFeatures/FinalizedFeatures, and this broker has no features to list.
"""

from protocol.messages import ApiVersionsResponse


def handle(ctx, header, request):
    from broker.dispatcher import api_version_entries

    return ApiVersionsResponse(error_code=0, api_keys=api_version_entries(), throttle_time_ms=0)
