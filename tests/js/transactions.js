// kafkajs transactions against the broker in $BROKER: one committed transaction of
// $COUNT messages to $TOPIC (with the offsets of group $GROUP sent to it), one aborted
// one, then a read_committed consumer (kafkajs' default) and a read_uncommitted one.
// Prints one JSON line: {"committed": [...values], "uncommitted": [...values],
// "offsets": [{partition, offset}]}. Used by tests/integration/test_transactions.py.
const { Kafka, logLevel } = require('kafkajs');

const env = process.env;
const kafka = new Kafka({ clientId: 'chronolog-it-kafkajs-tx', brokers: [env.BROKER], logLevel: logLevel.NOTHING,
                          connectionTimeout: 10000, requestTimeout: 15000, retry: { retries: 3 } });

async function readAll(readUncommitted, expected) {
  const consumer = kafka.consumer({ groupId: `${env.GROUP}-read-${readUncommitted}`, readUncommitted });
  await consumer.connect();
  await consumer.subscribe({ topic: env.TOPIC, fromBeginning: true });
  const seen = [];
  await new Promise((resolve) => {
    const timer = setTimeout(resolve, 8000);
    consumer.run({ eachMessage: async ({ message }) => {
      seen.push(message.value.toString());
      if (seen.length >= expected) { clearTimeout(timer); setTimeout(resolve, 1000); }
    } });
  });
  await consumer.disconnect();
  return seen;
}

async function main() {
  const n = parseInt(env.COUNT || '3', 10);
  const producer = kafka.producer({ transactionalId: env.TXN_ID, maxInFlightRequests: 1, idempotent: true });
  await producer.connect();
  let txn = await producer.transaction();
  const messages = [];
  for (let i = 0; i < n; i++) messages.push({ value: `c${i}` });
  await txn.send({ topic: env.TOPIC, messages });
  await txn.sendOffsets({ consumerGroupId: env.GROUP, topics: [{ topic: env.TOPIC, partitions: [{ partition: 0, offset: '7' }] }] });
  await txn.commit();
  txn = await producer.transaction();
  await txn.send({ topic: env.TOPIC, messages: [{ value: 'aborted-1' }, { value: 'aborted-2' }] });
  await txn.abort();
  await producer.disconnect();
  const admin = kafka.admin();
  await admin.connect();
  const offsets = await admin.fetchOffsets({ groupId: env.GROUP, topics: [env.TOPIC] });
  await admin.disconnect();
  const committed = await readAll(false, n);
  const uncommitted = await readAll(true, n + 2);
  console.log(JSON.stringify({ committed, uncommitted,
                               offsets: offsets[0].partitions.map((p) => ({ partition: p.partition, offset: p.offset })) }));
}

main().then(() => process.exit(0), (err) => { console.error(err); process.exit(1); });
