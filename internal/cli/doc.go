// Package cli is dlq's command line apart from its wiring: the exit codes
// every subcommand shares (exit.go), loading a subcommand's flags and
// configuration (config.go), and the operator commands. cmd/dlq holds the
// command table and calls them.
//
// The operator commands are front doors like the HTTP API and the control
// queue: they decode flags, call a running dlq and print its answer; what
// may be done is decided there, never here.
//
//   - ls, show, groups, stats, status, ack, rm, audit, jobs, alerts,
//     approvals, approve, reject, withdraw, edit-replay, policies and
//     policy call the HTTP API (client.go, messages.go, stats.go,
//     audit.go, jobs.go, alerts.go, recovery.go; their flags and
//     arguments in args.go, the API's parameter names said as flags in
//     flag_words.go): DLQ_URL, with the token
//     DLQ_TOKEN or DLQ_ADMIN_TOKEN. They print readable tables, or the
//     API's JSON with --json.
//   - export and import stream JSON Lines to and from the HTTP API
//     (transfer.go, export_file.go: the --output file, written beside
//     and resumed; export_selection.go: the selection a cut export
//     records; import.go): an export says when it was cut and resumes,
//     an import goes in requests of --batch lines, each all or nothing.
//   - replay, replays and cancel send commands to the control queue
//     (replay.go; replay_task.go: a task waited for and shown): DLQ_AMQP_URL
//     and the same token.
//
// Commands run in-process in the tests, against a real API over a fresh
// schema (package clitest); cmd/dlq's tests run the binary.
package cli
