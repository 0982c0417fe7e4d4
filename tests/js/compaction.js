// kafkajs against a compacted topic ($TOPIC on $BROKER).
//   MODE=produce: $COUNT keyed messages (keys k0..k{$KEYS-1}, values v<i>), then a
//                 tombstone (null value) for k0; prints {"offsets": [first, last]}.
//   MODE=consume: reads the topic from the beginning up to offset $END (exclusive) and
//                 prints {"records": [[offset, key, value or null], ...]}.
// Used by tests/integration/test_compaction.py.
const { Kafka, logLevel } = require('kafkajs');

const env = process.env;
const kafka = new Kafka({ clientId: 'chronolog-it-kafkajs-compact', brokers: [env.BROKER], logLevel: logLevel.NOTHING,
                          connectionTimeout: 10000, requestTimeout: 15000, retry: { retries: 3 } });

async function produce() {
  const n = parseInt(env.COUNT, 10);
  const keys = parseInt(env.KEYS, 10);
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  let first = null;
  let last = null;
  for (let i = 0; i < n; i += 100) {
    const messages = [];
    for (let j = i; j < Math.min(n, i + 100); j++) messages.push({ key: `k${j % keys}`, value: `v${j}` });
    const res = await producer.send({ topic: env.TOPIC, messages });
    if (first === null) first = Number(res[0].baseOffset);
  }
  const res = await producer.send({ topic: env.TOPIC, messages: [{ key: 'k0', value: null }] });
  last = Number(res[0].baseOffset);
  await producer.disconnect();
  console.log(JSON.stringify({ offsets: [first, last] }));
}

async function consume() {
  const end = parseInt(env.END, 10);
  const consumer = kafka.consumer({ groupId: env.GROUP });
  await consumer.connect();
  await consumer.subscribe({ topic: env.TOPIC, fromBeginning: true });
  const records = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`read up to ${records.length} records`)), 30000);
    consumer.run({ eachMessage: async ({ message }) => {
      const offset = Number(message.offset);
      if (offset < end) records.push([offset, message.key.toString(), message.value === null ? null : message.value.toString()]);
      if (offset >= end - 1) { clearTimeout(timer); resolve(); }
    } });
  });
  await consumer.disconnect();
  console.log(JSON.stringify({ records }));
}

(env.MODE === 'produce' ? produce() : consume()).then(() => process.exit(0), (e) => { console.error(e); process.exit(1); });
