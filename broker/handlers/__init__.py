"""One module per Kafka API: ``handle(ctx, header, request) -> response | None | awaitable``."""

from broker.handlers import (  # noqa: F401
    api_versions,
    create_topics,
    delete_records,
    delete_topics,
    fetch,
    find_coordinator,
    init_producer_id,
    list_offsets,
    metadata,
    produce,
)
