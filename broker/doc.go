// Package broker is dlq's side of RabbitMQ: the one connection that
// recovers (Conn), the topology dlq declares and the rules it refuses to
// break (topology.go), the check that no RabbitMQ policy can drop messages
// from dlq's own queues (PolicyCheck, through the management API),
// publishing, and reading a delivery into broker-level types: the header
// codec, properties, the death record, failure details and dlq's own replay
// marks. It knows AMQP, not dlq's schema: package consumer turns a delivery
// into a stored row, package replay a stored row into a publishing.
//
// # One reconnect layer
//
// The whole program shares one Conn. It redials with backoff and hands out
// channels on the current connection; it never re-creates channels behind
// a user's back. A user (a consumer, a publisher) owns its channel, watches
// it, and when it dies starts over with a new one. That keeps the rule
// "never acknowledge a delivery received before a reconnect" local and
// obvious: delivery tags live and die with their channel.
//
// Between the socket and amqp091-go sits a frame filter (framefilter.go):
// amqp091-go closes the whole connection on a header table it cannot
// decode (nested deeper than 32 levels, more than 8192 entries), so one
// such dead letter would take every consumer and publisher down on each
// redelivery. The filter replaces such a table with one naming it and keeps
// the table's bytes in its Conn, which hands them to the consumer
// (Conn.UndecodableHeaders); the consumer stores the message raw, flagged,
// with those bytes. No package-level state is involved: each Conn keeps its
// own. The filter also gives the ingest consumers (Conn.DeliverRawHeaders)
// every other header table of theirs as bytes, under a secret only their
// Conn knows (rawheaders.go), so amqp091-go copies bytes instead of
// building maps; RawTable (rawtable.go) reads them into exactly what
// AppendHeadersJSON and the extract functions would make of amqp091-go's
// table.
//
// Over both sits a write gatherer (coalesce.go): amqp091-go flushes after
// every publish, and at replay rates a system call and a TCP segment per
// message cost dlq and RabbitMQ CPU that the machine did not have. Writes
// made within 200 µs leave as one; a failed write is reported by the next
// one, which amqp091-go treats as the connection failing.
//
// Notification channels given to amqp091-go (NotifyClose, NotifyBlocked,
// NotifyPublish, NotifyReturn) are buffered and always drained, because the
// library blocks, and since v1.13 drops the event, when a listener does not
// take it within 5 seconds.
//
// # Lossless headers
//
// Header tables are stored as typed JSON (AppendHeadersJSON): strings,
// booleans, null, tables and arrays stay plain JSON, while every number,
// timestamp, decimal and byte array is an object {"type": T, "value": V}
// naming its AMQP type. DecodeHeadersJSON gives back the identical Go
// values, so a replay publishes the same types the application sent. This
// codec is the hottest code in ingest, which is why it is a hand-written
// appender rather than encoding/json over reflection.
//
// # Death record and failure details
//
// ExtractDeath reads x-death (most recent entry first) and the
// x-first-death-*/x-last-death-* headers into reason, count, source queue,
// exchange and routing key. ExtractFailure reads the failure conventions of
// common frameworks (Spring AMQP, MassTransit, NServiceBus, Celery, and a
// generic x-error-*/x-exception-* set). On replay, the broker's own headers
// (IsBrokerHeader) are removed: RabbitMQ ignores or mangles a republished
// x-death, and dlq keeps its own counters (x-dlq-replay-count).
package broker
