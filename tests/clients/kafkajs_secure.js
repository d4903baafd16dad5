// Logs in over SASL_SSL (MECHANISM, USERNAME, PASSWORD; the CA file in CA), creates TOPIC,
// produces COUNT records with acks=all, reads them back with a consumer group, and prints a
// JSON summary. A failed login prints {"error": <kafkajs error name>} and exits 0.
const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

const env = process.env
const count = Number(env.COUNT)
const kafka = new Kafka({
  brokers: [env.BOOTSTRAP],
  clientId: 'sluice-secure-test',
  logLevel: logLevel.NOTHING,
  ssl: { ca: [fs.readFileSync(env.CA, 'utf-8')] },
  sasl: { mechanism: env.MECHANISM, username: env.USERNAME, password: env.PASSWORD },
  retry: { retries: 2 },
})

async function main() {
  const admin = kafka.admin()
  try {
    await admin.connect()
  } catch (e) {
    console.log(JSON.stringify({ error: e.name, message: e.message }))
    return
  }
  await admin.createTopics({ topics: [{ topic: env.TOPIC, numPartitions: 2 }], waitForLeaders: true })
  await admin.disconnect()
  const producer = kafka.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  const sent = Array.from({ length: count }, (_, i) => ({ key: `k${i}`, value: `v${i}-` + 'x'.repeat(i % 300) }))
  await producer.send({ topic: env.TOPIC, acks: -1, messages: sent })
  await producer.disconnect()
  const consumer = kafka.consumer({ groupId: `g-${env.TOPIC}` })
  await consumer.connect()
  await consumer.subscribe({ topic: env.TOPIC, fromBeginning: true })
  const got = new Map()
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`consumed ${got.size} of ${count}`)), 60000)
    consumer.run({
      eachMessage: async ({ message }) => {
        got.set(message.key.toString(), message.value.toString())
        if (got.size === count) { clearTimeout(timer); resolve() }
      },
    })
  })
  await consumer.disconnect()
  const mismatches = sent.filter(m => got.get(m.key) !== m.value).map(m => m.key)
  console.log(JSON.stringify({ produced: count, consumed: got.size, mismatches }))
}

main().catch(e => { console.error(e); process.exit(1) })
