"""A confluent-kafka consumer of the consumer group protocol (group.protocol=consumer),
or with a fifth argument ``classic:<partition.assignment.strategy>`` of the classic one,
run as its own process by test_consumer_group_protocol.py and test_group_migration.py:
it consumes, commits, and prints one JSON line per half second with its assignment and
how many records it read. SIGTERM closes it (a leave); SIGKILL is a crash."""

import json
import signal
import sys
import time

from confluent_kafka import Consumer


def main(bootstrap: str, group: str, topic: str, client_id: str, protocol: str = "consumer") -> None:
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "client.id": client_id, "auto.offset.reset": "earliest", "auto.commit.interval.ms": 200}
    if protocol.startswith("classic:"):
        conf.update({"group.protocol": "classic", "partition.assignment.strategy": protocol.split(":", 1)[1],
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    c = Consumer(conf)
    c.subscribe([topic])
    consumed = 0
    last = 0.0
    while not stop:
        m = c.poll(0.1)
        if m is not None and m.error() is None:
            consumed += 1
        if time.time() - last > 0.5:
            last = time.time()
            print(json.dumps({"assigned": sorted(tp.partition for tp in c.assignment()), "consumed": consumed}),
                  flush=True)
    c.close()


if __name__ == "__main__":
    main(*sys.argv[1:6])
