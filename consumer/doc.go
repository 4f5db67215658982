// Package consumer ingests dead messages: it reads dlq's dead-letter queues,
// writes what it reads to PostgreSQL in batches, and acknowledges a batch
// only after its transaction committed.
//
// # Pipeline
//
// Each consumer owns one AMQP channel with a bounded prefetch. Its reader
// converts deliveries as they arrive (spreading the CPU cost of header
// decoding over the wait for the database) and hands a batch to the writer
// when it reaches BatchSize messages or BatchBytes body bytes, or once
// Linger has passed since the batch's first message and the writer is free:
// while the writer is busy, a partial batch keeps filling rather than being
// cut (every batch costs a commit, so under load batches grow to full size;
// when idle, a message waits at most Linger). One writer per consumer
// commits batches in delivery order and acknowledges each with a single
// multiple-ack of its highest delivery tag; the reader keeps filling the
// next batch meanwhile. With the prefetch at twice the batch size the broker
// never waits on us.
//
// # Conversion
//
// Converting a delivery into a row happens here, at the consumer's edge
// (convert.go): package broker reads the headers into its own types (the
// typed header JSON, the death record, failure details, dlq's replay
// marks) and knows nothing of the schema. The row carries the parsed death
// record next to the headers, so reads never parse x-death again.
//
// # Why not Watermill here
//
// Watermill's AMQP subscriber holds one message in flight per subscription
// and its default marshaler cannot carry non-string headers (x-death is an
// array of tables). Batching one transaction per few hundred messages and
// keeping every header type is the whole point of this path, so it talks to
// amqp091-go directly. Watermill carries the control queue, where one
// command at a time is exactly right.
//
// # Failure handling
//
//   - PostgreSQL down: the writer keeps its batch and retries with backoff;
//     the reader blocks once the next batch is full, so no more deliveries
//     arrive beyond the prefetch. Nothing is nacked, so nothing spins; the
//     deliveries wait, unacknowledged, in RabbitMQ. After any failed attempt
//     the writer asks whether the batch committed after all (the COMMIT may
//     have succeeded before the connection died) before writing it again.
//   - Data PostgreSQL refuses (SQLSTATE classes 22, 23 and 54): the batch
//     is split until the one message is found; that message is stored raw
//     with the refusal in conversion_error — first with its properties and
//     headers but without failure details and with text columns cut to 255
//     bytes, and if that is refused too, its body alone. It is never
//     dropped and never retried forever.
//   - After an unknown commit outcome, a batch found committed is counted
//     from the number of rows it wrote (store.CommittedRows), so its
//     duplicates count as duplicates, not as stored.
//   - Headers the AMQP client library cannot decode arrive rewritten by
//     package broker (framefilter.go), which keeps the original table with
//     the Conn until the reader takes it (Conn.UndecodableHeaders); such a
//     message is stored raw and flagged, with their AMQP encoding. Before,
//     it closed the connection on every delivery.
//   - Every other header table of a delivery to these consumers (their tags
//     start with "dlq-<name>-", Conn.DeliverRawHeaders) reaches convert as
//     its AMQP bytes (Conn.RawHeaders), which it reads with
//     broker.RawTable: the same row as from amqp091-go's amqp.Table
//     (FuzzConvertRaw), without building one for the whole table.
//   - Channel or connection lost: everything received on it is abandoned.
//     Its delivery tags mean nothing on another channel, so nothing received
//     before a reconnect is ever acknowledged. RabbitMQ redelivers those
//     messages; the store recognises the ones already committed.
//   - Consumer cancelled by the server (queue deleted): the consumer
//     re-declares its queue and consumes again.
//
// # Acknowledgement confirmation
//
// basic.ack has no reply. After acknowledging a batch the writer issues a
// synchronous basic.qos on the same channel; RabbitMQ handles a channel's
// methods in order, so its reply proves the ack was processed. Only then is
// the batch removed from ingest_inflight (see package store).
//
// For a quorum queue "processed" means the channel took the ack, not that
// the queue applied it: while too many of the channel's commands wait for
// the queue's Raft log, the channel holds settlements back, and if it
// closes then, they are dropped and the messages delivered again (RabbitMQ
// issue #10327). So batches the writer still holds as confirmed when its
// session ends are left in ingest_inflight, where a redelivery finds them;
// the cleanup job removes them once no delivery of theirs can come back.
// During a session, a confirmed batch stays in ingest_inflight for another
// 5 seconds (confirmDelay), far longer than that hold-back (tens to
// hundreds of milliseconds measured), so a connection lost right after an
// ack does not turn its redeliveries into second rows.
//
// # Shutdown
//
// When Run's context ends, Run first notes each queue's consumer count;
// then each consumer cancels its subscription (no more deliveries), drains
// what was already delivered into final batches, commits and acknowledges
// them, and keeps its channel open until RabbitMQ shows those
// acknowledgements applied — a cancelled quorum queue consumer is counted
// until every delivery it holds is settled, so the count falls back by
// this process's consumers (settle.go) — and only then returns. Deliveries
// that cannot be committed within ShutdownTimeout are left unacknowledged
// and RabbitMQ keeps them.
package consumer
