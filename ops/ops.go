package ops

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/cron"
	"github.com/dlq/dlq/crypt"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// Replays is what the layer needs of the replay service; *replay.Service
// implements it.
type Replays interface {
	// Start validates and records a task, or answers a dry run.
	Start(ctx context.Context, req replay.Request, actor store.Actor) (replay.Task, error)
	// StartCommand is Start for a reserved control command: answer builds
	// the command's answer, recorded in the task's own transaction.
	StartCommand(ctx context.Context, req replay.Request, actor store.Actor, commandID string, answer func(replay.Task) (string, error)) (replay.Task, error)
	// Get returns a task; store.ErrNotFound when there is none.
	Get(ctx context.Context, id int64) (replay.Task, error)
	// List returns tasks with an id below before (0: from the newest),
	// newest first.
	List(ctx context.Context, before int64, limit int) ([]replay.Task, error)
	// ListUnfinished is List of the tasks not finished yet.
	ListUnfinished(ctx context.Context, before int64, limit int) ([]replay.Task, error)
	// Cancel stops a task, asking allow under the task's lock first.
	Cancel(ctx context.Context, id int64, actor store.Actor, allow func(replay.Task) error) (replay.Task, error)
	// ExchangeExists looks at a target exchange on the broker;
	// replay.ErrNoBroker where the service has no connection.
	ExchangeExists(ctx context.Context, name string) (bool, error)
	// QueueExists looks at a queue on the broker (the one a replay through
	// the default exchange reaches); replay.ErrNoBroker as ExchangeExists.
	QueueExists(ctx context.Context, name string) (bool, error)
}

// CronViews is what the cron service shows; *cron.Service implements
// it.
type CronViews interface {
	Jobs(ctx context.Context) (cron.JobsView, error)
	Alerts(ctx context.Context) (cron.AlertsView, error)
	// Policies shows the automatic replay policies with their state.
	Policies(ctx context.Context) (cron.PoliciesView, error)
}

// Config configures a Service.
type Config struct {
	// Store holds the messages. Required.
	Store *store.Store
	// Replays runs replay tasks. Optional: without it the replay actions
	// are ErrUnavailable.
	Replays Replays
	// Cron shows the cron jobs and alerts. Optional: without it Jobs and
	// Alerts are ErrUnavailable.
	Cron CronViews
	// ConfirmAbove is the largest selection by filter that a replay,
	// acknowledge or delete runs without Confirm. Optional; 0 never asks.
	ConfirmAbove int64
	// CountBudget and CountCap bound the count behind a listing's total:
	// past either, the total is an estimate. Optional; default
	// store.CountBudgetDefault and store.CountCapDefault.
	CountBudget time.Duration
	CountCap    int64
	// ApprovalAbove is the largest bulk replay, acknowledge or delete that
	// runs without a second principal's approval. Optional; 0 turns
	// approval off.
	ApprovalAbove int64
	// ApprovalTTL is how long a request waits for a decision. Optional;
	// default ApprovalTTLDefault.
	ApprovalTTL time.Duration
	// Principals returns the configured principals (the API's tokens), to
	// know who may approve a request: one that nobody but its requester
	// could approve is refused at once, and the console names who can.
	// Optional: without it every request is recorded, and nobody named.
	Principals func() []auth.Principal
	// EditLockedHeaders may never be changed by an edit-then-replay,
	// besides dlq's own and the broker's. Optional.
	EditLockedHeaders []string
	// EditSensitiveHeaders need force to be changed. Optional.
	EditSensitiveHeaders []string
	// KeepUserID shows an edit's copy with its user_id, as the replay
	// service publishes it (replay.keep_user_id). Optional.
	KeepUserID bool
	// Ring opens sealed messages (encryption at rest, sealed.go).
	// Optional: without it a sealed message is shown flagged, with what is
	// stored in plain text only.
	Ring *crypt.Ring
	// Redaction masks configured header and body values for principals
	// below its reveal role (redaction.go). Optional.
	Redaction Redaction
	// Logger is optional; default slog.Default().
	Logger *slog.Logger
}

func (c *Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("ops: Store is required")
	case c.ConfirmAbove < 0:
		return fmt.Errorf("ops: ConfirmAbove must be >= 0, got %d", c.ConfirmAbove)
	case c.CountBudget < 0 || c.CountCap < 0:
		return fmt.Errorf("ops: CountBudget (%s) and CountCap (%d) must be >= 0", c.CountBudget, c.CountCap)
	case c.ApprovalAbove < 0 || c.ApprovalTTL < 0:
		return fmt.Errorf("ops: ApprovalAbove (%d) and ApprovalTTL (%s) must be >= 0", c.ApprovalAbove, c.ApprovalTTL)
	}
	return nil
}

// Service is the operations layer. It is safe for concurrent use and keeps
// no state of its own: everything lives in PostgreSQL.
type Service struct {
	cfg Config
	st  *store.Store
	log *slog.Logger
	red *redactor // nil: nothing masked
}

// New validates cfg.
func New(cfg Config) (*Service, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	red, err := newRedactor(cfg.Redaction)
	if err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, st: cfg.Store, log: cmp.Or(cfg.Logger, slog.Default()).With("component", "ops"), red: red}, nil
}

// Door names, recorded as the audit row's "via".
const (
	ViaAPI     = "api"
	ViaControl = "control"
	ViaConsole = "console"
)

// Caller is who acts, and through which door.
type Caller struct {
	// Principal is the authenticated token. Required.
	Principal auth.Principal
	// Via is the door (ViaAPI, ViaControl, ViaConsole).
	Via string
	// RequestID ties the audit row to the request: the HTTP request id,
	// the control command's command_id.
	RequestID string
}

func (c Caller) actor() store.Actor {
	p := c.Principal
	return store.Actor{Name: p.Name, Role: p.Role, Via: c.Via, RequestID: c.RequestID, Scope: p.Queues}
}
