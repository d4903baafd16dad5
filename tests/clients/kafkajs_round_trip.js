// Produces COUNT records with kafkajs (acks=all), reads them back with kafkajs's Fetch
// implementation, and prints a JSON summary of what matched.
const { Kafka, CompressionTypes, logLevel } = require('kafkajs')

const bootstrap = process.env.BOOTSTRAP
const topic = process.env.TOPIC
const count = Number(process.env.COUNT)
const partitions = Number(process.env.PARTITIONS)
const compression = process.env.COMPRESSION === 'gzip' ? CompressionTypes.GZIP : CompressionTypes.None

const record = i => ({
  partition: i % partitions,
  key: `key-${i}`,
  value: `value-${i}-` + 'x'.repeat(i % 50),
  headers: { idx: String(i) },
  timestamp: String(1700000000000 + i),
})

async function main() {
  const kafka = new Kafka({ brokers: [bootstrap], clientId: 'sluice-test', logLevel: logLevel.ERROR })
  const admin = kafka.admin()
  await admin.connect()
  await admin.createTopics({ topics: [{ topic, numPartitions: partitions }], waitForLeaders: true })
  const meta = await admin.fetchTopicMetadata({ topics: [topic] })
  if (meta.topics[0].partitions.length !== partitions) throw new Error('wrong partition count')

  const producer = kafka.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  const all = Array.from({ length: count }, (_, i) => record(i))
  for (let i = 0; i < count; i += 500) {
    await producer.send({ topic, acks: -1, compression, messages: all.slice(i, i + 500) })
  }
  await producer.disconnect()

  const offsets = await admin.fetchTopicOffsets(topic)
  await admin.disconnect()

  // kafkajs keeps its Cluster factory behind a symbol; it is the same code its consumer uses.
  const createCluster = Object.getOwnPropertySymbols(kafka).map(s => kafka[s]).find(
    v => typeof v === 'function' && v.length <= 1 && v.toString().includes('new Cluster'))
  const cluster = createCluster({})
  await cluster.connect()
  await cluster.addTargetTopic(topic)
  await cluster.refreshMetadata()
  const got = new Map()
  for (let p = 0; p < partitions; p++) got.set(p, [])
  const next = new Array(partitions).fill(0)
  const high = offsets.map(o => Number(o.high))
  const deadline = Date.now() + 60000
  while (next.some((n, p) => n < high[p]) && Date.now() < deadline) {
    const leaders = cluster.findLeaderForPartitions(topic, [...Array(partitions).keys()])
    for (const [nodeId, parts] of Object.entries(leaders)) {
      const broker = await cluster.findBroker({ nodeId })
      const resp = await broker.fetch({
        replicaId: -1, isolationLevel: 1, maxWaitTime: 100, minBytes: 1, maxBytes: 1 << 20,
        topics: [{ topic, partitions: parts.map(p => ({ partition: p, fetchOffset: String(next[p]), maxBytes: 65536 })) }],
      })
      for (const t of resp.responses) {
        for (const pd of t.partitions) {
          if (pd.errorCode !== 0) throw new Error(`fetch error ${pd.errorCode}`)
          for (const m of pd.messages) {
            if (Number(m.offset) < next[pd.partition]) continue
            got.get(pd.partition).push(m)
            next[pd.partition] = Number(m.offset) + 1
          }
        }
      }
    }
  }
  await cluster.disconnect()

  const mismatches = []
  const perPartition = new Map()
  for (let p = 0; p < partitions; p++) perPartition.set(p, [])
  all.forEach(r => perPartition.get(r.partition).push(r))
  let consumed = 0
  for (let p = 0; p < partitions; p++) {
    const want = perPartition.get(p)
    const have = got.get(p)
    consumed += have.length
    if (have.length !== want.length) mismatches.push(`partition ${p}: ${have.length} != ${want.length}`)
    have.forEach((m, n) => {
      const w = want[n]
      if (!w) return
      if (Number(m.offset) !== n) mismatches.push(`p${p}@${n}: offset ${m.offset}`)
      if (m.key.toString() !== w.key) mismatches.push(`p${p}@${n}: key`)
      if (m.value.toString() !== w.value) mismatches.push(`p${p}@${n}: value`)
      if (m.headers.idx.toString() !== w.headers.idx) mismatches.push(`p${p}@${n}: header`)
      if (m.timestamp !== w.timestamp) mismatches.push(`p${p}@${n}: timestamp ${m.timestamp}`)
    })
  }
  console.log(JSON.stringify({ produced: count, consumed, mismatches }))
}

main().catch(e => { console.error(e); process.exit(1) })
