"""Time the group coordinator takes to answer a steady ConsumerGroupHeartbeat (KIP-848)
of a member whose group subscribes by regular expression, on a broker of many topics:
what each heartbeat of each member of such a group costs the event loop.

``--members`` (20) members of one group subscribe with ``--regex`` (``topic-1.*``) on a
broker of ``--topics`` (1,000) topics named ``topic-N``; once the group is stable,
``--heartbeats`` (2,000) heartbeats go round its members (the coordinator in-process,
its records written nowhere).

    .venv/bin/python bench/heartbeats.py [--topics 1000] [--members 20] [--root DIR]

``--root`` measures another checkout (a ``git worktree`` of an older commit).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class _Store:
    def write_offsets(self, *args, **kwargs):
        pass

    def write_group(self, *args, **kwargs):
        pass

    def write_records(self, *args, **kwargs):
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--members", type=int, default=20)
    ap.add_argument("--regex", default="topic-1.*")
    ap.add_argument("--heartbeats", type=int, default=2000)
    ap.add_argument("--root", default=str(REPO), help="the checkout to measure (default: this one)")
    args = ap.parse_args()
    root = str(Path(args.root).resolve())
    sys.path.insert(0, root)
    from broker.coordinator.consumer_group import ConsumerGroups
    from broker.coordinator.group import GroupCoordinator
    from protocol import messages as M
    from tests.unit.test_group_coordinator import ManualTime

    TP = M.ConsumerGroupHeartbeatRequest.TopicPartitions
    loop = asyncio.new_event_loop()
    clock = ManualTime()
    topics = {f"topic-{i}": (uuid.UUID(int=i + 1), 4) for i in range(args.topics)}
    groups = dict(topic_metadata=topics.get, topic_names=lambda: list(topics), session_timeout_ms=600_000,
                  heartbeat_interval_ms=5000, max_size=100_000)
    if "topics_version" in inspect.signature(ConsumerGroups.__init__).parameters:
        groups["topics_version"] = lambda: 1  # the topics do not change during the run
    coord = GroupCoordinator(clock=clock, scheduler=clock, store=_Store(), future_factory=loop.create_future,
                             topic_partitions=lambda n: (topics.get(n) or (0, None))[1], consumer_groups=groups)

    def hb(member, epoch, owned, first=False):
        return coord.consumer.heartbeat(
            group_id="g", member_id=member, member_epoch=epoch, instance_id=None, rack_id=None,
            rebalance_timeout_ms=5000 if epoch == 0 else -1, subscribed_topic_names=None,
            subscribed_topic_regex=args.regex if first else None, server_assignor=None,
            owned=[] if epoch == 0 else None if owned is None else
            [TP(topic_id=t, partitions=sorted(ps)) for t, ps in owned.items()],
            client_id="bench", client_host="/127.0.0.1", version=1)

    state = {}
    for i in range(args.members):
        r = hb(f"m{i}", 0, None, first=True)
        state[f"m{i}"] = (r[3], r[5] or {})
    clock.advance(0)  # the regex resolved
    for _ in range(6):  # to a steady state: each member owns what it was given
        for m, (epoch, owned) in list(state.items()):
            r = hb(m, epoch, owned)
            state[m] = (r[3], r[5] if r[5] is not None else owned)
    members = list(state)
    t = time.perf_counter()
    for k in range(args.heartbeats):
        m = members[k % len(members)]
        r = hb(m, state[m][0], None)
        if r[0] != 0:
            raise SystemExit(f"heartbeat of {m} answered error {r[0]}: {r[1]}")
    seconds = time.perf_counter() - t
    loop.close()
    print(f"{args.topics:,} topics, {args.members} members subscribed by {args.regex!r}: "
          f"{seconds / args.heartbeats * 1e6:,.0f} µs per heartbeat ({root})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
