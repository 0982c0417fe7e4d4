"""IncrementalAlterConfigs (key 44), v0-1: SET, DELETE, APPEND and SUBTRACT (list-typed
properties only; other types answer INVALID_CONFIG "Config value append is not allowed
for config key: k") change only the named keys of a topic's overrides or of the broker's
dynamic configs. Everything else as AlterConfigs (see broker.handlers.alter_configs)."""

from __future__ import annotations

from protocol.messages import IncrementalAlterConfigsResponse

from broker.handlers.alter_configs import run


def handle(ctx, header, request, session=None):
    from config.describe import DELETE, apply_incremental

    def make_new_for(r):
        ops = [(c.name, c.config_operation, c.value) for c in r.configs]
        return lambda current, type_of, current_value: apply_incremental(current, ops, type_of, current_value)

    results = run(ctx, request.resources, make_new_for, request.validate_only,
                  IncrementalAlterConfigsResponse.AlterConfigsResourceResponse,
                  null_allowed=lambda c: c.config_operation == DELETE, session=session,
                  api="IncrementalAlterConfigs")
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=results)
