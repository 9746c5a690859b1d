// dynalite on 127.0.0.1 that outlives its clients.
//
// dynalite 4.0.0 handles a request stream error with `req.on('error', e => { throw e })`,
// so a client killed mid-request ("Error: aborted", ECONNRESET) ends the whole server,
// and every later DynamoDB call sees "connection refused". This launcher require()s
// dynalite, listens on 127.0.0.1 only, and logs such errors instead of exiting.
//
// Usage: node dynalite_launcher.js PORT [DATA_DIR]
//   DYNALITE_MODULE  the dynalite package directory (default: the repo's node_modules/dynalite)
'use strict'

const path = require('path')

const [portArg, dataDir] = process.argv.slice(2)
const port = Number(portArg)
if (!Number.isInteger(port) || port < 1 || port > 65535) {
  console.error(`usage: node dynalite_launcher.js PORT [DATA_DIR] (got port ${JSON.stringify(portArg)})`)
  process.exit(2)
}
const modulePath = process.env.DYNALITE_MODULE || path.resolve(__dirname, '..', '..', 'node_modules', 'dynalite')
const dynalite = require(modulePath)

// What dynalite throws from a request's event handlers is about that request;
// the server and its data are intact, so keep serving the other clients.
process.on('uncaughtException', (err) => {
  console.error(`dynalite_launcher: kept serving after: ${(err && err.stack) || err}`)
})

const server = dynalite({ path: dataDir || undefined, createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 })
// A failed listen (port taken) must end the process, not be swallowed above.
server.on('error', (err) => {
  console.error(`dynalite_launcher: cannot listen on 127.0.0.1:${port}: ${err.message}`)
  process.exit(1)
})
server.listen(port, '127.0.0.1', () => {
  console.log(`dynalite_launcher: listening on http://127.0.0.1:${port}`)
})

// SIGTERM: answer the requests in flight, then exit. dynalite writes an item and
// its index entries as separate LevelDB writes, so a kill in the middle of a
// request can leave an item without its entry in the `due` index (invisible to
// every query, for good). Real DynamoDB has no such window; stop dynalite this way.
process.on('SIGTERM', () => {
  server.close(() => process.exit(0))
  setTimeout(() => process.exit(0), 5000).unref()
})
