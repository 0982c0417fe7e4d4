"""A confluent-kafka consumer of the consumer group protocol (group.protocol=consumer)
run as its own process by test_consumer_group_protocol.py: it consumes, commits, and
prints one JSON line per half second with its assignment and how many records it read.
SIGTERM closes it (a leave); SIGKILL is a crash."""

import json
import signal
import sys
import time

from confluent_kafka import Consumer


def main(bootstrap: str, group: str, topic: str, client_id: str) -> None:
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                  "client.id": client_id, "auto.offset.reset": "earliest", "auto.commit.interval.ms": 200})
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
    main(*sys.argv[1:5])
