// kafkajs sets retention.ms on TOPIC (AlterConfigs), reads it back, and prints it as JSON.
const { Kafka, logLevel, ConfigResourceTypes } = require('kafkajs')

async function main() {
  const kafka = new Kafka({ brokers: [process.env.BOOTSTRAP], clientId: 'sluice-test-configs', logLevel: logLevel.ERROR })
  const admin = kafka.admin()
  await admin.connect()
  const topic = process.env.TOPIC
  await admin.alterConfigs({
    validateOnly: false,
    resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configEntries: [{ name: 'retention.ms', value: '3600000' }] }],
  })
  const described = await admin.describeConfigs({
    includeSynonyms: false,
    resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: ['retention.ms'] }],
  })
  await admin.disconnect()
  const entry = described.resources[0].configEntries.find(e => e.configName === 'retention.ms')
  console.log(JSON.stringify({ 'retention.ms': entry.configValue }))
}

main().catch(e => { console.error(e); process.exit(1) })
