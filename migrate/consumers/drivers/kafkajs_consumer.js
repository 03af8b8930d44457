// Consume every given partition from its beginning with kafkajs, writing each record as a JSON line.
// Run by migrate.consumers: node kafkajs_consumer.js BOOTSTRAP OUT IDLE_MS DEADLINE_MS GROUP TOPIC:PARTITION:END ...
// kafkajs has no manual assignment: it joins GROUP (a group of one member) and subscribes to the topics from their
// beginning. Codecs: gzip is built in; snappy and lz4 come from kafkajs-snappy and kafkajs-lz4 when installed; zstd
// has none here. A partition is done once a batch reached its END; it stops once every partition is done, after
// IDLE_MS without a batch, or at DEADLINE_MS; its last line says which.
'use strict'
const fs = require('fs')

const [bootstrap, out, idleMs, deadlineMs, group, ...specs] = process.argv.slice(2)
const fd = fs.openSync(out, 'a')
const emit = obj => fs.writeSync(fd, JSON.stringify(obj) + '\n')

const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = require('kafkajs')
const codecs = ['gzip']
try {
  const LZ4 = require('kafkajs-lz4')
  CompressionCodecs[CompressionTypes.LZ4] = new LZ4().codec
  codecs.push(`lz4 (kafkajs-lz4 ${require('kafkajs-lz4/package.json').version})`)
} catch (e) {}
try {
  CompressionCodecs[CompressionTypes.Snappy] = require('kafkajs-snappy')
  codecs.push(`snappy (kafkajs-snappy ${require('kafkajs-snappy/package.json').version})`)
} catch (e) {}
emit({ client: `kafkajs ${require('kafkajs/package.json').version} (codecs: ${codecs.join(', ')})` })

const wanted = specs.map(s => {
  const parts = s.split(':')
  return { topic: parts.slice(0, -2).join(':'), partition: Number(parts[parts.length - 2]), end: BigInt(parts[parts.length - 1]) }
})
const key = (t, p) => `${t}:${p}`
const ends = new Map(wanted.map(w => [key(w.topic, w.partition), w.end]))
const done = new Set(wanted.filter(w => w.end === 0n).map(w => key(w.topic, w.partition)))

const logCreator = () => ({ level, log }) => {
  if (level <= logLevel.ERROR) emit({ error: `${log.message}${log.error ? ': ' + log.error : ''}` })
}
const kafka = new Kafka({ clientId: 'kafka-log-migrate-clients', brokers: [bootstrap], logLevel: logLevel.ERROR, logCreator })
const consumer = kafka.consumer({ groupId: group, retry: { retries: 2 } })

let moved = Date.now()
const started = Date.now()
let finish
const finished = new Promise(resolve => { finish = resolve })

function progress (topic, partition, lastOffset) {
  const k = key(topic, partition)
  moved = Date.now()
  if (ends.has(k) && BigInt(lastOffset) + 1n >= ends.get(k)) done.add(k)
  if (done.size === ends.size) finish('every partition read to its end')
}

async function main () {
  await consumer.connect()
  consumer.on(consumer.events.END_BATCH_PROCESS, e => progress(e.payload.topic, e.payload.partition, e.payload.lastOffset))
  consumer.on(consumer.events.CRASH, e => emit({ error: `crash: ${e.payload.error}` }))
  for (const topic of [...new Set(wanted.map(w => w.topic))]) {
    await consumer.subscribe({ topic, fromBeginning: true })
  }
  if (done.size === ends.size) finish('every partition read to its end')
  await consumer.run({
    autoCommit: false,
    eachBatch: async ({ batch }) => {
      for (const m of batch.messages) {
        // a v0 message has no timestamp: kafkajs leaves it undefined, Kafka's reader says -1
        const headers = []
        for (const [name, value] of Object.entries(m.headers || {})) {
          for (const v of Array.isArray(value) ? value : [value]) headers.push([name, v == null ? null : Buffer.from(v).toString('hex')])
        }
        emit({ r: [batch.topic, batch.partition, Number(m.offset), m.key == null ? null : m.key.toString('hex'),
          m.value == null ? null : m.value.toString('hex'), headers, m.timestamp == null ? -1 : Number(m.timestamp)] })
      }
    }
  })
  const timer = setInterval(() => {
    if (Date.now() - started > Number(deadlineMs)) finish('deadline')
    if (Date.now() - moved > Number(idleMs)) {
      const behind = wanted.filter(w => !done.has(key(w.topic, w.partition))).map(w => `${w.topic}-${w.partition}`)
      finish(`no progress for ${idleMs} ms: ${behind.join(', ')} not at their end`)
    }
  }, 50)
  const reason = await finished
  clearInterval(timer)
  emit({ end: reason })
  await consumer.disconnect()
  process.exit(0)
}

main().catch(e => { emit({ error: `${e}` }); emit({ end: `failed: ${e}` }); process.exit(0) })
