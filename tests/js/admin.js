// kafkajs admin calls a single broker answers as a single-broker Kafka cluster
// ($TOPIC with 2 partitions on $BROKER): partition reassignment to the replica set it
// has (accepted), to a broker that does not exist (INVALID_REPLICA_ASSIGNMENT), and the
// list of ongoing reassignments. Prints one JSON line. Used by tests/integration/test_admin_calls.py.
const { Kafka, logLevel } = require('kafkajs');

const env = process.env;
const kafka = new Kafka({ clientId: 'chronolog-it-kafkajs-admin', brokers: [env.BROKER], logLevel: logLevel.NOTHING,
                          connectionTimeout: 10000, requestTimeout: 15000, retry: { retries: 1 } });

async function main() {
  const admin = kafka.admin();
  await admin.connect();
  const out = {};
  await admin.alterPartitionReassignments({ topics: [{ topic: env.TOPIC, partitionAssignment: [
    { partition: 0, replicas: [0] }, { partition: 1, replicas: [0] }] }] });
  out.same = 'ok';
  try {
    await admin.alterPartitionReassignments({ topics: [{ topic: env.TOPIC, partitionAssignment: [
      { partition: 0, replicas: [7] }] }] });
    out.other = 'accepted';
  } catch (e) {
    // kafkajs wraps per-partition errors in a KafkaJSAggregateError
    out.other = (e.errors || [e]).map((x) => x.type || x.name).join(',');
  }
  out.list = await admin.listPartitionReassignments({ topics: [{ topic: env.TOPIC, partitions: [0, 1] }] });
  out.listAll = await admin.listPartitionReassignments({});
  await admin.disconnect();
  console.log(JSON.stringify(out));
}

main().catch((e) => { console.error(e.stack || String(e)); process.exit(1); });
