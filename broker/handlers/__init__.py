"""One module per Kafka API: ``handle(ctx, header, request) -> response | None | awaitable``."""

from broker.handlers import (  # noqa: F401
    alter_configs,
    api_versions,
    create_partitions,
    create_topics,
    describe_cluster,
    describe_configs,
    incremental_alter_configs,
    delete_records,
    delete_topics,
    fetch,
    find_coordinator,
    init_producer_id,
    list_offsets,
    metadata,
    produce,
)
