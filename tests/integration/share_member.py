"""A share-group member in its own process, for tests that kill it: a confluent-kafka
ShareConsumer in explicit acknowledgement mode that polls ``topic`` and never
acknowledges, printing one JSON line ``{"held": [[partition, offset], ...]}`` whenever it
holds more records. Usage: share_member.py BOOTSTRAP GROUP TOPIC."""

import json
import sys
import time

from confluent_kafka import ShareConsumer


def main() -> None:
    bootstrap, group, topic = sys.argv[1:4]
    sc = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                        "share.acknowledgement.mode": "explicit", "log_level": 0})
    sc.subscribe([topic])
    held = []
    while True:
        try:
            got = [m for m in sc.poll(timeout=0.5) if not m.error()]
        except Exception:  # explicit mode: polling again with records unacknowledged
            got = []
        if got:
            held += [[m.partition(), m.offset()] for m in got]
            print(json.dumps({"held": held}), flush=True)
        time.sleep(0.05)


if __name__ == "__main__":
    main()
