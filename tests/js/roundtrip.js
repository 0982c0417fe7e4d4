// Produce N messages with kafkajs and read them back, over the security settings given
// in the environment. Prints one JSON line: {"produced": [...offsets], "consumed": [...values]}.
// Used by tests/integration/test_security.py.
const fs = require('fs');
const { Kafka, logLevel } = require('kafkajs');

const env = process.env;
const config = { clientId: 'chronolog-it-kafkajs', brokers: [env.BROKER], logLevel: logLevel.NOTHING,
                 connectionTimeout: 10000, requestTimeout: 15000, retry: { retries: 2 } };
if (env.CA_FILE) config.ssl = { ca: [fs.readFileSync(env.CA_FILE, 'utf-8')] };
if (env.MECHANISM) config.sasl = { mechanism: env.MECHANISM.toLowerCase(), username: env.USERNAME, password: env.PASSWORD };

async function main() {
  const kafka = new Kafka(config);
  const n = parseInt(env.COUNT || '3', 10);
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  const messages = [];
  for (let i = 0; i < n; i++) messages.push({ key: `k${i}`, value: `v${i}` });
  const res = await producer.send({ topic: env.TOPIC, messages });
  await producer.disconnect();
  const consumer = kafka.consumer({ groupId: env.GROUP });
  await consumer.connect();
  await consumer.subscribe({ topic: env.TOPIC, fromBeginning: true });
  const consumed = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`consumed ${consumed.length} of ${n}`)), 30000);
    consumer.run({ eachMessage: async ({ message }) => {
      consumed.push(message.value.toString());
      if (consumed.length >= n) { clearTimeout(timer); resolve(); }
    } });
  });
  await consumer.disconnect();
  console.log(JSON.stringify({ produced: res.map(r => r.baseOffset), consumed }));
}

main().catch(e => { console.log(JSON.stringify({ error: `${e.name}: ${e.message}`, type: e.type || null })); process.exit(1); });
