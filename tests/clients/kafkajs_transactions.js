// A kafkajs transactional producer commits one transaction and aborts another over several
// partitions; a kafkajs consumer (read_committed, its default) reads the topic back. Prints a
// JSON summary of what it read.
const { Kafka, logLevel } = require('kafkajs')

const bootstrap = process.env.BOOTSTRAP
const topic = process.env.TOPIC
const partitions = 3
const values = (prefix, n) => Array.from({ length: n }, (_, i) => ({ partition: i % partitions, value: `${prefix}-${i}` }))

async function main() {
  const kafka = new Kafka({ brokers: [bootstrap], clientId: 'sluice-txn', logLevel: logLevel.ERROR })
  const admin = kafka.admin()
  await admin.connect()
  await admin.createTopics({ topics: [{ topic, numPartitions: partitions }], waitForLeaders: true })
  await admin.disconnect()

  const producer = kafka.producer({ transactionalId: 'js-txn', idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  for (const [prefix, commit] of [['committed', true], ['aborted', false]]) {
    const txn = await producer.transaction()
    await txn.send({ topic, acks: -1, messages: values(prefix, 20) })
    if (commit) await txn.commit()
    else await txn.abort()
  }
  await producer.disconnect()

  const consumer = kafka.consumer({ groupId: 'js-txn-reader' })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const got = []
  let last = Date.now()
  await consumer.run({ eachMessage: async ({ message }) => { got.push(message.value.toString()); last = Date.now() } })
  const deadline = Date.now() + 60000
  while (Date.now() < deadline && !(got.length >= 20 && Date.now() - last > 3000)) {
    await new Promise(r => setTimeout(r, 200))
  }
  await consumer.disconnect()
  console.log(JSON.stringify({ got: got.sort() }))
}

main().catch(e => { console.error(e); process.exit(1) })
