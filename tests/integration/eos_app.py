"""An exactly-once consume-transform-produce application, as users write them with
confluent-kafka, used by tests/integration/test_exactly_once.py (run as a subprocess,
killed and restarted by the test).

    python eos_app.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID [BATCH [PAUSE_S]]

Reads INPUT with a read_committed consumer in GROUP (no auto-commit), writes ``out-`` +
each value to OUTPUT and commits the consumer's positions in the same transaction
(``send_offsets_to_transaction``). An abortable error aborts the transaction and rewinds
the consumer to the group's committed offsets; a fatal one (fenced) ends the process
with exit code 3, like an application that a supervisor restarts. Prints ``committed N``
after each commit. BATCH (200) records at most per transaction and a PAUSE_S (0)
sleep inside each transaction make a run last long enough to be killed in the middle.
"""

import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def rewind(c: Consumer) -> None:
    parts = c.assignment()
    if not parts:
        return
    for tp in c.committed(parts, 30):
        c.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))


def main() -> int:
    bootstrap, src, dst, group, tid = sys.argv[1:6]
    batch = int(sys.argv[6]) if len(sys.argv) > 6 else 200
    pause = float(sys.argv[7]) if len(sys.argv) > 7 else 0.0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                  "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000})
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": 10000,
                  "linger.ms": 5})
    p.init_transactions(60)
    c.subscribe([src])
    total = 0
    while True:
        msgs = [m for m in c.consume(batch, 0.5) if m.error() is None]
        if not msgs:
            continue
        try:
            p.begin_transaction()
            for m in msgs:
                p.produce(dst, key=m.key(), value=b"out-" + m.value())
            time.sleep(pause)
            p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 60)
            p.commit_transaction(60)
            total += len(msgs)
            print(f"committed {total}", flush=True)
        except KafkaException as exc:
            err = exc.args[0]
            if err.fatal():
                print(f"fatal: {err}", flush=True)
                return 3
            print(f"aborting: {err}", flush=True)
            try:
                p.abort_transaction(60)
            except KafkaException as exc2:
                print(f"abort failed: {exc2.args[0]}", flush=True)
                return 3  # the restarted instance's init_transactions ends what is open
            rewind(c)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KafkaException as exc:  # init_transactions or rewind against a broker that is down
        print(f"error: {exc}", flush=True)
        sys.exit(4)
