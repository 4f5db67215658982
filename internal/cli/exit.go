package cli

// Exit codes, the same for every dlq subcommand (the operator commands
// here, and serve, migrate and topology in cmd/dlq).
const (
	ExitOK          = 0
	ExitFailure     = 1 // the operation failed (see stderr)
	ExitUsage       = 2 // bad command line or configuration
	ExitUnavailable = 3 // a dependency (RabbitMQ, PostgreSQL, the API) is unreachable
	ExitNotFound    = 4 // the thing asked for does not exist
	ExitDenied      = 5 // authentication or permission refused
	// ExitPending: dlq migrate --status found migrations to apply or
	// being applied, or a backfill pass under way.
	ExitPending = 6
)
