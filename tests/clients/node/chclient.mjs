// Runs statements through @clickhouse/client (Node) against the sink's ClickHouse HTTP
// interface and prints what came back as JSON, for the integration tests.
//
//   node chclient.mjs URL PASSWORD [--compress] [--session ID] query < statements.json
//   node chclient.mjs URL PASSWORD [--compress] insert TABLE ROWS
//
// `query` reads a JSON list of {"sql", "params"?, "format"?} (format JSONEachRow when not
// given; "command" runs it as a command) and prints one result per statement: its rows,
// or the server's error with its code.
import { createClient } from '@clickhouse/client'

const [url, password, ...rest] = process.argv.slice(2)
const compress = rest.includes('--compress')
const sessionAt = rest.indexOf('--session')
const session_id = sessionAt >= 0 ? rest[sessionAt + 1] : undefined
const words = rest.filter((word, i) => !word.startsWith('--') && (sessionAt < 0 || i !== sessionAt + 1))
const [command, ...args] = words

const client = createClient({
  url,
  username: 'default',
  password,
  database: 'turnstream',
  session_id,
  compression: { request: compress, response: compress },
  request_timeout: 60_000,
})

async function run(statement) {
  try {
    if (statement.format === 'command') {
      const answer = await client.command({ query: statement.sql, query_params: statement.params })
      return { summary: answer.summary ?? null }
    }
    const result = await client.query({
      query: statement.sql,
      query_params: statement.params,
      format: statement.format ?? 'JSONEachRow',
    })
    return { rows: await result.json() }
  } catch (err) {
    return { error: { code: Number(err.code ?? -1), message: String(err.message) } }
  }
}

async function main() {
  const ping = await client.ping()
  if (!ping.success) throw ping.error
  if (command === 'query') {
    const chunks = []
    for await (const chunk of process.stdin) chunks.push(chunk)
    const statements = JSON.parse(Buffer.concat(chunks).toString())
    const results = []
    for (const statement of statements) results.push(await run(statement))
    console.log(JSON.stringify(results))
  } else if (command === 'insert') {
    const [table, rows] = [args[0], Number(args[1])]
    const values = Array.from({ length: rows }, (_, i) => ({
      id: i,
      tag: `tag-${i % 3}`,
      at: new Date(Date.UTC(2026, 11, 6) + i).toISOString().replace('T', ' ').replace('Z', ''),
      words: Array(i % 5).fill('w'),
      score: i % 2 ? null : i / 4,
    }))
    await client.insert({ table, values, format: 'JSONEachRow' })
    const result = await client.query({ query: `SELECT count() AS n FROM ${table}`, format: 'JSONEachRow' })
    console.log(JSON.stringify({ count: Number((await result.json())[0].n) }))
  } else {
    throw new Error(`unknown command ${command}`)
  }
  await client.close()
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
