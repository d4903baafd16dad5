// kafkajs deletes the records of TOPIC/PARTITION before OFFSET, then prints the partition's low
// and high watermarks as JSON.
const { Kafka, logLevel } = require('kafkajs')

async function main() {
  const kafka = new Kafka({ brokers: [process.env.BOOTSTRAP], clientId: 'sluice-test-delete', logLevel: logLevel.ERROR })
  const admin = kafka.admin()
  await admin.connect()
  const topic = process.env.TOPIC
  const partition = Number(process.env.PARTITION)
  // kafkajs looks the partition's leader up in metadata it must already hold (against any broker).
  await admin.fetchTopicMetadata({ topics: [topic] })
  await admin.deleteTopicRecords({ topic, partitions: [{ partition, offset: process.env.OFFSET }] })
  const offsets = await admin.fetchTopicOffsets(topic)
  await admin.disconnect()
  const p = offsets.find(o => o.partition === partition)
  console.log(JSON.stringify({ low: Number(p.low), high: Number(p.high) }))
}

main().catch(e => { console.error(e); process.exit(1) })
