// A kafkajs consumer group reads COUNT records from TOPIC, commits, and prints a JSON summary.
const { Kafka, logLevel } = require('kafkajs')

async function main() {
  const kafka = new Kafka({ brokers: [process.env.BOOTSTRAP], clientId: 'sluice-test-group', logLevel: logLevel.ERROR })
  const count = Number(process.env.COUNT)
  const consumer = kafka.consumer({ groupId: process.env.GROUP, sessionTimeout: 10000, heartbeatInterval: 1000 })
  await consumer.connect()
  await consumer.subscribe({ topic: process.env.TOPIC, fromBeginning: true })
  const seen = new Set()
  let done
  const finished = new Promise(resolve => { done = resolve })
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      seen.add(`${partition}:${message.offset}`)
      if (seen.size >= count) done()
    },
  })
  const timeout = setTimeout(() => done(), 60000)
  await finished
  clearTimeout(timeout)
  await consumer.commitOffsets([])  // flush pending auto-commits
  await consumer.disconnect()
  const admin = kafka.admin()
  await admin.connect()
  const offsets = await admin.fetchOffsets({ groupId: process.env.GROUP, topics: [process.env.TOPIC] })
  await admin.disconnect()
  const committed = offsets[0].partitions.reduce((sum, p) => sum + Number(p.offset), 0)
  console.log(JSON.stringify({ unique: seen.size, committed }))
}

main().catch(e => { console.error(e); process.exit(1) })
