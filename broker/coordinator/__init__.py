"""The group coordinator: classic consumer groups and committed offsets.

* :mod:`broker.coordinator.group`: the state machine (JoinGroup/SyncGroup/Heartbeat/
  LeaveGroup, offsets, admin operations) with an injected clock and scheduler;
* :mod:`broker.coordinator.records`: Kafka's ``__consumer_offsets`` key/value formats;
* :mod:`broker.coordinator.store`: writes to and replays ``__consumer_offsets``.
"""

from broker.coordinator.group import GroupCoordinator  # noqa: F401
