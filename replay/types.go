package replay

import (
	"time"

	"github.com/dlq/dlq/store"
)

// Request asks for a replay. Its JSON form is the body of POST
// /api/v1/replays and of the control queue's "replay" command.
type Request struct {
	// IDs selects messages by id. Either IDs or Filter. An id of a message
	// that does not exist (or is outside Scope) is requested and skipped,
	// as not_found when no message ever had it, else as deleted, unless
	// none of them exists (store.ErrEmptySelection, dry run or not).
	IDs []int64 `json:"ids,omitempty"`
	// Filter selects messages by filter. Either IDs or Filter.
	Filter *store.Filter `json:"filter,omitempty"`
	// Limit caps how many messages a filter selects. Optional.
	Limit int `json:"limit,omitempty"`
	// RatePerSecond throttles publishing (token bucket). Optional; 0 means
	// as fast as confirms allow.
	RatePerSecond float64 `json:"rate_per_second,omitempty"`
	// DelaySeconds postpones the start. Optional.
	DelaySeconds int `json:"delay_seconds,omitempty"`
	// StartAt starts the task at an absolute time (RFC 3339) instead:
	// after tonight's deploy. Optional; not with DelaySeconds. The
	// messages are selected when the task is created, as with a delay:
	// messages arriving before StartAt are not swept in.
	StartAt *time.Time `json:"start_at,omitempty"`
	// Target overrides where messages go. Optional; default each message's
	// original exchange and routing key.
	Target *Target `json:"target,omitempty"`
	// DryRun returns the count and a sample and changes nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// Canary publishes the first Count messages, waits WaitSeconds, and
	// stops the task, leaving the rest untouched, if any of them could not
	// be published or died again.
	Canary *Canary `json:"canary,omitempty"`
	// Force replays messages already replayed max_replays times.
	Force bool `json:"force,omitempty"`
	// OnUnknown is what the task does with a publish whose outcome is
	// unknown (its confirm never came): OnUnknownRetry sends it again,
	// OnUnknownHold never does. Optional; the configured default
	// (replay.on_unknown) is recorded when the task is created.
	OnUnknown string `json:"on_unknown,omitempty"`
	// Scope restricts the selection to these source queues: the caller's
	// permission (auth.Principal.Queues), never user input. Nil means every
	// queue.
	Scope []string `json:"-"`
	// Approval is the approval request this replay carries out: the task
	// selects the request's snapshot (what was counted when it was asked
	// for), while IDs, Filter and Limit stay as the requester asked, for
	// the task and its audit row to show. Approved in the task's own
	// transaction. Set by the operations layer, never user input.
	Approval int64 `json:"-"`
	// Approver is who approves it; the task's actor is then the requester.
	// Set by the operations layer with Approval.
	Approver *store.Actor `json:"-"`
	// Edit makes this an edit-then-replay of the one message IDs names.
	// Set by the operations layer, never decoded from a request.
	Edit *Edit `json:"-"`
	// EditAudit is the edit's diff for the audit row.
	EditAudit map[string]any `json:"-"`
	// EditAfterTask is the task of the message's edit this one follows
	// (0: none), whose id the copy's replay id was derived with: the edit
	// is refused if another was recorded since (store.NewEdit.AfterTaskID).
	EditAfterTask int64 `json:"-"`
}

// Target is an exchange and routing key to publish to.
type Target struct {
	Exchange   string `json:"exchange"`
	RoutingKey string `json:"routing_key"`
}

// Canary configures canary mode.
type Canary struct {
	Count       int `json:"count"`
	WaitSeconds int `json:"wait_seconds"`
}

// DefaultCanaryWait is how long a canary is watched when an operator asks
// for one without saying how long: the CLI's --canary-wait and every
// replay form of the console start from it, so the same replay asked from
// either watches its canary as long. The API and the control queue take
// wait_seconds as given.
const DefaultCanaryWait = 30 * time.Second

// Task statuses.
const (
	StatusScheduled    = store.TaskScheduled    // waiting for its start time or a runner
	StatusRunning      = store.TaskRunning      // publishing
	StatusCanaryWait   = store.TaskCanaryWait   // canary published, watching for re-deaths
	StatusCompleted    = store.TaskCompleted    // every selected message settled
	StatusCancelled    = store.TaskCancelled    // stopped by an operator
	StatusFailed       = store.TaskFailed       // stopped by an error it cannot get past
	StatusCanaryFailed = store.TaskCanaryFailed // a canary message died again; the rest untouched
	StatusDryRun       = "dry_run"              // the answer to a dry run: nothing recorded
)

// Task is a replay task and its progress. Its JSON form is the public
// contract of the API and the control queue.
type Task struct {
	ID        int64  `json:"id"`
	Status    string `json:"status"`
	Requested int64  `json:"requested"`
	Claimed   int64  `json:"claimed"`
	Published int64  `json:"published"`
	Failed    int64  `json:"failed"`
	Skipped   int64  `json:"skipped"`
	// SkipReasons breaks Skipped down by reason: max_replays (the loop
	// guard; force lifts it), not_pending (replayed, acknowledged or being
	// replayed by another task when its turn came), deleted, not_found (an
	// id no message ever had). Absent when
	// nothing was skipped.
	SkipReasons map[string]int64 `json:"skip_reasons,omitempty"`
	// Unknown counts messages whose confirm never came (connection lost,
	// replaying process died) and that the task does not send again (with
	// on_unknown hold, or once it sent them again as often as it may): they
	// may have been delivered, and are back to pending with the reason
	// recorded.
	Unknown   int64 `json:"unknown"`
	Remaining int64 `json:"remaining"`

	// Republished counts the publishes the task sent again after an
	// unknown outcome (on_unknown retry), each once its own outcome was
	// recorded.
	Republished int64 `json:"republished"`

	// The request as accepted.
	Request Request `json:"request"`
	// Sample holds a few selected messages' ids for a dry run.
	Sample    []int64 `json:"sample,omitempty"`
	DryRun    bool    `json:"dry_run"`
	Error     string  `json:"error,omitempty"`
	CreatedBy string  `json:"created_by,omitempty"`
	// CanaryIDs are the canary messages published so far.
	CanaryIDs  []int64    `json:"canary_ids,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	StartAt    time.Time  `json:"start_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// Outcome says, once the task has finished, what it delivered:
	// OutcomeAllPublished, OutcomePartial or OutcomeNonePublished
	// (TaskOutcome). Absent while it runs, and for a dry run.
	Outcome string `json:"outcome,omitempty"`
	// Errors are why the failed and unknown messages of a finished task
	// did not publish, most frequent first (at most 20 reasons), so that
	// whoever reads the task sees the reasons without opening each
	// message. Set only by a status read of one task (GET
	// /api/v1/replays/{id}, replay_status) that finished with failures.
	Errors []store.ReplayErrorCount `json:"errors,omitempty"`
	// ApprovalID is the approval request the task carried out and
	// ApprovedBy who approved it (CreatedBy is its requester); absent for
	// a task that needed no approval.
	ApprovalID int64  `json:"approval_id,omitempty"`
	ApprovedBy string `json:"approved_by,omitempty"`
	// RequestedAt is when the requester asked, for a task carried out on
	// approval: its created_at is when it was approved. Absent otherwise.
	RequestedAt *time.Time `json:"requested_at,omitempty"`
	// DryRunApproval says, in a dry run's answer, whether the real replay
	// would wait for approval (the operations layer fills it in).
	store.DryRunApproval
	// EditOf is the message an edit-then-replay task publishes a corrected
	// copy of (0: the task is no edit), read from the task's own row so a
	// list of tasks marks its edits without a query per task. Not part of
	// the task's JSON.
	EditOf int64 `json:"-"`
}
