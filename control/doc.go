// Package control answers the control queue (default dlq.control): JSON
// commands that applications and the CLI publish to ask for replays,
// acknowledgements and deletes, with the answer sent to their reply_to.
// It also holds the client (Dial, Client.Call) the CLI uses.
//
// Control runs a Watermill router on the control queue. Watermill gives the
// handler model (one handler per consumer, middleware, Run/Close with a
// timeout); the transport underneath is this package's Subscriber on
// broker.Conn rather than watermill-amqp, because the program has exactly
// one reconnect layer (broker.Conn) and watermill-amqp brings its own, and
// because watermill-amqp's default marshaler drops or fails on non-string
// headers, while Marshaler here keeps the whole header table and every
// property as typed JSON. Messages are never nacked with requeue: every
// command, however malformed, is answered and acknowledged, so nothing
// crashes, blocks or loops the consumer.
//
// A command carries its token in x-dlq-token. Who may send which command,
// which queues a scoped token touches, which replay tasks it sees and when
// a selection needs confirm: true are decided by the operations layer
// (package ops), exactly as for the HTTP API and the console; the handler
// decodes, calls ops and encodes the answer. A mutating command is
// reserved by command_id before it runs (control_commands) and its answer
// stored after; a replay's answer is stored in the task's own transaction,
// so a redelivered command can never start a second task. A repeated
// command_id returns the stored first answer and does nothing again; a
// repeat of a command still running waits for its answer (or, should its
// handler die, runs it) in a goroutine of its own that holds its delivery,
// so that the consumer goes on with other commands.
// Commands whose only failure was the database being unavailable, a panic
// (answered internal; the consumer goes on), or a missing confirm: true
// are forgotten, so that a retry with the same id runs them; a handler
// renews and forgets its own reservation only, never one a repeat took
// over once its own lapsed. Audit rows
// carry the token's scope and command_id.
package control
