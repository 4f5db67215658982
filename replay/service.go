package replay

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/crypt"
	"github.com/dlq/dlq/store"
)

// Config configures a Service.
type Config struct {
	// Store holds messages and tasks. Required.
	Store *store.Store
	// Conn publishes replayed messages. Required to run tasks (Run); a
	// Service without it only records and reads tasks.
	Conn *broker.Conn
	// MaxReplays is the loop guard. Optional; default 5.
	MaxReplays int
	// Lease is how long a claim or a task holds without renewal; renewals
	// happen every Lease/3. Optional; default 30s.
	Lease time.Duration
	// BatchSize is the most messages claimed per transaction. Optional;
	// default 500.
	BatchSize int
	// BatchBytes bounds the bodies one claim loads into memory (a single
	// larger message is still claimed alone). Optional; default 32 MiB.
	BatchBytes int64
	// Window bounds the publishes awaiting their confirm per task.
	// Optional; default 1000.
	Window int
	// MaxTasks bounds the tasks this instance runs at once. Optional;
	// default 4.
	MaxTasks int
	// MaxTaskMessages is the largest selection without an explicit limit.
	// Optional; default 1,000,000.
	MaxTaskMessages int64
	// PollInterval is how often an idle runner looks for due tasks.
	// Optional; default 1s.
	PollInterval time.Duration
	// ShutdownTimeout bounds waiting for confirms and recording outcomes at
	// shutdown. Optional; default 30s.
	ShutdownTimeout time.Duration
	// ConfirmTimeout is how long a publish waits for its confirm before its
	// outcome is recorded as unknown (time the connection spends blocked by
	// an alarm does not count); the channel is then closed, so the other
	// publishes in flight on it end unknown too. Optional; default 2m.
	ConfirmTimeout time.Duration
	// OnUnknown is what a task does with a publish whose outcome is
	// unknown, unless its request says: OnUnknownRetry (send it again) or
	// OnUnknownHold (never). Optional; default OnUnknownRetry.
	OnUnknown string
	// UnknownRetries bounds how often a task with on_unknown retry sends
	// one message again. Optional; default UnknownRetriesDefault, at most
	// MaxUnknownRetries.
	UnknownRetries int
	// KeepUserID republishes the user_id property as stored. Optional;
	// default false: user_id is dropped, because RabbitMQ refuses (and
	// closes the channel of) a publish whose user_id is not the
	// connection's user.
	KeepUserID bool
	// ProgressRetention is how long a finished task's progress gauges stay
	// after it ends, so that a scrape sees its final values. Optional;
	// default 15m.
	ProgressRetention time.Duration
	// Ring opens sealed messages and edits to publish them (encryption
	// at rest, package store). Optional: without it a sealed message fails
	// its publish, naming its key.
	Ring *crypt.Ring
	// Name identifies this instance in claims. Optional; default host-pid.
	Name string
	// Logger is optional; default slog.Default().
	Logger *slog.Logger
	// Registerer receives the replay metrics. Optional.
	Registerer prometheus.Registerer
}

func (c *Config) setDefaults() {
	c.MaxReplays = cmp.Or(c.MaxReplays, 5)
	c.Lease = cmp.Or(c.Lease, 30*time.Second)
	c.BatchSize = cmp.Or(c.BatchSize, 500)
	c.BatchBytes = cmp.Or(c.BatchBytes, 32<<20)
	c.Window = cmp.Or(c.Window, 1000)
	c.MaxTasks = cmp.Or(c.MaxTasks, 4)
	c.MaxTaskMessages = cmp.Or(c.MaxTaskMessages, 1_000_000)
	c.PollInterval = cmp.Or(c.PollInterval, time.Second)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, 30*time.Second)
	c.ConfirmTimeout = cmp.Or(c.ConfirmTimeout, 2*time.Minute)
	c.OnUnknown = cmp.Or(c.OnUnknown, OnUnknownRetry)
	c.UnknownRetries = cmp.Or(c.UnknownRetries, UnknownRetriesDefault)
	c.ProgressRetention = cmp.Or(c.ProgressRetention, 15*time.Minute)
	if c.Name == "" {
		host, _ := os.Hostname()
		c.Name = fmt.Sprintf("%s-%d", cmp.Or(host, "dlq"), os.Getpid())
	}
	c.Logger = cmp.Or(c.Logger, slog.Default())
}

func (c *Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("replay: Store is required")
	case c.MaxReplays < 1:
		return fmt.Errorf("replay: MaxReplays must be >= 1, got %d", c.MaxReplays)
	case c.Lease < 100*time.Millisecond:
		return fmt.Errorf("replay: Lease must be >= 100ms, got %s", c.Lease)
	case c.BatchSize < 1:
		return fmt.Errorf("replay: BatchSize must be >= 1, got %d", c.BatchSize)
	case c.Window < 1:
		return fmt.Errorf("replay: Window must be >= 1, got %d", c.Window)
	case c.MaxTasks < 1:
		return fmt.Errorf("replay: MaxTasks must be >= 1, got %d", c.MaxTasks)
	case c.MaxTaskMessages < 1:
		return fmt.Errorf("replay: MaxTaskMessages must be >= 1, got %d", c.MaxTaskMessages)
	case c.ConfirmTimeout < 0:
		return fmt.Errorf("replay: ConfirmTimeout must be >= 0, got %s", c.ConfirmTimeout)
	case c.ProgressRetention < 0:
		return fmt.Errorf("replay: ProgressRetention must be >= 0, got %s", c.ProgressRetention)
	case c.UnknownRetries < 1 || c.UnknownRetries > MaxUnknownRetries:
		return fmt.Errorf("replay: UnknownRetries must be between 1 and %d, got %d", MaxUnknownRetries, c.UnknownRetries)
	}
	if err := checkOnUnknown("OnUnknown", c.OnUnknown); err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	return nil
}

// Service records replay tasks and, in Run, executes them.
// It is safe for concurrent use.
type Service struct {
	cfg     Config
	st      *store.Store
	log     *slog.Logger
	metrics *metrics
	wake    chan struct{}
	seq     atomic.Int64

	mu      sync.Mutex
	running map[int64]*taskRun

	skipMu sync.Mutex
	skips  map[int64]skipReasons // by task; see withSkipReasons
}

// skipReasons is a task's skip breakdown, valid while its skipped counter
// is still skipped.
type skipReasons struct {
	skipped int64
	reasons map[string]int64
}

// New validates cfg and registers the metrics.
func New(cfg Config) (*Service, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Service{
		cfg:     cfg,
		st:      cfg.Store,
		log:     cfg.Logger.With("component", "replay"),
		metrics: m,
		wake:    make(chan struct{}, 1),
		running: map[int64]*taskRun{},
		skips:   map[int64]skipReasons{},
	}, nil
}

// Start validates req and records a task with its snapshot, or, for a dry
// run, counts and samples the selection and changes nothing.
func (s *Service) Start(ctx context.Context, req Request, actor store.Actor) (Task, error) {
	return s.start(ctx, req, actor, "", nil)
}

// StartCommand is Start for a reserved control command: answer builds the
// command's answer from the task, recorded in the task's own transaction.
func (s *Service) StartCommand(ctx context.Context, req Request, actor store.Actor, commandID string, answer func(Task) (string, error)) (Task, error) {
	return s.start(ctx, req, actor, commandID, answer)
}

func (s *Service) start(ctx context.Context, req Request, actor store.Actor, commandID string, answer func(Task) (string, error)) (Task, error) {
	now := time.Now()
	if err := req.Validate(s.cfg.MaxTaskMessages, now); err != nil {
		return Task{}, err
	}
	// The task records what it will do with unknown outcomes, whatever
	// this instance's default becomes later.
	req.OnUnknown = cmp.Or(req.OnUnknown, s.cfg.OnUnknown)
	sel := req.selection()
	if req.DryRun {
		return s.dryRun(ctx, req, sel, actor, now)
	}
	reqJSON, err := json.Marshal(req)
	if err != nil {
		return Task{}, fmt.Errorf("replay: encode request: %w", err)
	}
	n := store.NewReplayTask{
		Selection:      sel,
		Limit:          int64(req.Limit),
		MaxItems:       s.cfg.MaxTaskMessages,
		Request:        reqJSON,
		RatePerSecond:  req.RatePerSecond,
		StartAt:        req.startAt(now),
		Force:          req.Force,
		Actor:          actor,
		AuditSelection: auditSelection(req),
		CommandID:      commandID,
		Approval:       req.Approval,
		UnknownRetries: s.unknownRetries(req.OnUnknown),
		NamedIDs:       req.namedIDs(),
	}
	if req.Approver != nil {
		n.Approver = *req.Approver
	}
	if req.Edit != nil {
		if len(req.IDs) != 1 {
			return Task{}, invalid("an edit replays exactly one message, not %d", len(req.IDs))
		}
		b, err := json.Marshal(req.Edit)
		if err != nil {
			return Task{}, fmt.Errorf("replay: encode edit: %w", err)
		}
		n.Edit = &store.NewEdit{MessageID: req.IDs[0], Edit: b, CopyReplayID: req.Edit.ReplayID,
			AfterTaskID: req.EditAfterTask, AuditDetail: req.EditAudit}
	}
	if req.Target != nil {
		ex := req.Target.Exchange
		n.TargetExchange, n.TargetRoutingKey = &ex, req.Target.RoutingKey
	}
	if req.Canary != nil {
		n.CanaryCount, n.CanaryWait = req.Canary.Count, time.Duration(req.Canary.WaitSeconds)*time.Second
	}
	if answer != nil {
		n.Answer = func(t store.ReplayTask) (string, error) { return answer(taskOf(t)) }
	}
	st, err := s.st.CreateReplayTask(ctx, n)
	if err != nil {
		return Task{}, mapStoreError(err)
	}
	t := taskOf(st)
	if t.Skipped > 0 {
		// Ids of messages that do not exist (deleted or never stored),
		// settled as skipped when the task was created; counted as the runner counts its skips.
		s.metrics.replays.WithLabelValues(resultSkipped).Add(float64(t.Skipped))
	}
	s.log.Info("replay task created", "task_id", t.ID, "requested", t.Requested, "actor", actor.Name, "via", actor.Via,
		"start_at", t.StartAt, "rate_per_second", req.RatePerSecond)
	s.poke()
	return t, nil
}

// dryRun counts and samples the selection of req and changes nothing.
func (s *Service) dryRun(ctx context.Context, req Request, sel store.Filter, actor store.Actor, now time.Time) (Task, error) {
	p, err := s.st.PreviewReplay(ctx, sel, int64(req.Limit), s.cfg.MaxTaskMessages, s.cfg.MaxReplays, dryRunSampleLength)
	if err != nil {
		return Task{}, mapStoreError(err)
	}
	t := Task{Status: StatusDryRun, DryRun: true, Request: req, Requested: p.Matched, Sample: p.Sample,
		CreatedBy: actor.Name, CreatedAt: now.UTC()}
	deleted, notFound, err := s.missingIDs(ctx, req, sel)
	if err != nil {
		return Task{}, err
	}
	if req.namedIDs() && p.Matched == 0 {
		// The task would not be created (none of the ids exists): say so,
		// as the request itself would, rather than count them skipped.
		return Task{}, store.ErrEmptySelection
	}
	// As the task would: ids of messages that do not exist are requested,
	// and skipped as deleted or never stored.
	t.Requested += deleted + notFound
	skip := map[string]int64{store.SkipNotPending: p.NotPending, store.SkipDeleted: deleted, store.SkipNotFound: notFound}
	if !req.Force {
		skip[store.SkipMaxReplays] = p.Guarded
	}
	for reason, n := range skip {
		if n > 0 {
			if t.SkipReasons == nil {
				t.SkipReasons = map[string]int64{}
			}
			t.SkipReasons[reason] = n
			t.Skipped += n
		}
	}
	if req.Limit == 0 && p.Matched > s.cfg.MaxTaskMessages {
		t.Error = fmt.Sprintf("more than %d messages match: a replay needs a limit of at most %d", s.cfg.MaxTaskMessages, s.cfg.MaxTaskMessages)
		t.Requested = s.cfg.MaxTaskMessages
	}
	t.Remaining = max(t.Requested-t.Skipped, 0)
	// A start_at within the tolerance in the past starts at once,
	// as the store records it.
	t.StartAt = req.startAt(now)
	if t.StartAt.Before(now) {
		t.StartAt = now.UTC()
	}
	return t, nil
}

// missingIDs counts the distinct ids a replay by ids names that its
// selection (sel, with the caller's scope) does not hold, as the task
// records them skipped (store.NewReplayTask.NamedIDs): notFound above the
// highest id the store ever gave (never stored), deleted the others.
func (s *Service) missingIDs(ctx context.Context, req Request, sel store.Filter) (deleted, notFound int64, err error) {
	if !req.namedIDs() {
		return 0, 0, nil
	}
	found, err := s.st.MessagesExist(ctx, req.IDs, sel.Scope)
	if err != nil {
		return 0, 0, err
	}
	highest, err := s.st.HighestMessageID(ctx)
	if err != nil {
		return 0, 0, err
	}
	seen := make(map[int64]bool, len(req.IDs))
	for _, id := range req.IDs {
		switch {
		case found[id] || seen[id]:
		case id > highest:
			notFound++
		default:
			deleted++
		}
		seen[id] = true
	}
	return deleted, notFound, nil
}

func auditSelection(req Request) any {
	if req.Filter != nil {
		return map[string]any{"filter": req.Filter, "limit": req.Limit, "scope": req.Scope}
	}
	return map[string]any{"ids": req.IDs, "scope": req.Scope}
}

// mapStoreError turns the store's validation errors into ErrInvalidRequest.
func mapStoreError(err error) error {
	switch {
	case errors.Is(err, store.ErrInvalidFilter), errors.Is(err, store.ErrSelectionTooLarge):
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	return err
}

// Get returns a task; store.ErrNotFound when there is none.
func (s *Service) Get(ctx context.Context, id int64) (Task, error) {
	t, err := s.st.GetReplayTask(ctx, id)
	if err != nil {
		return Task{}, err
	}
	out := []Task{taskOf(t)}
	s.withSkipReasons(ctx, out)
	return out[0], nil
}

// withSkipReasons fills in SkipReasons of the tasks that skipped
// something. Counting them reads every item of a task, so a breakdown is
// kept until the task's skipped counter moves (a finished task's never
// does; a CLI following a task asks twice a second). A failure to count
// leaves them out rather than failing the read.
func (s *Service) withSkipReasons(ctx context.Context, tasks []Task) {
	const keep = 1024
	var ask []int64
	s.skipMu.Lock()
	for i := range tasks {
		t := &tasks[i]
		if t.Skipped == 0 || t.DryRun {
			continue
		}
		if c, ok := s.skips[t.ID]; ok && c.skipped == t.Skipped {
			t.SkipReasons = c.reasons
			continue
		}
		ask = append(ask, t.ID)
	}
	s.skipMu.Unlock()
	if len(ask) == 0 {
		return
	}
	got, err := s.st.ReplaySkipReasons(ctx, ask)
	if err != nil {
		s.log.Warn("cannot count why replay task messages were skipped; answering without", "task_ids", ask, "error", err)
		return
	}
	s.skipMu.Lock()
	defer s.skipMu.Unlock()
	if len(s.skips)+len(got) > keep {
		clear(s.skips)
	}
	for i := range tasks {
		t := &tasks[i]
		if r, ok := got[t.ID]; ok {
			t.SkipReasons = r
			// The counter and the items were read apart: keep the
			// breakdown only when it adds up to the counter read.
			var sum int64
			for _, n := range r {
				sum += n
			}
			if sum == t.Skipped {
				s.skips[t.ID] = skipReasons{skipped: t.Skipped, reasons: r}
			}
		}
	}
}

// List returns tasks with an id below before (0: from the newest), newest
// first; limit 0 means 50, at most 1000. Who may see which task is the
// operations layer's rule (ops.TaskVisible), not the service's.
func (s *Service) List(ctx context.Context, before int64, limit int) ([]Task, error) {
	return s.list(ctx, s.st.ListReplayTasks, before, limit)
}

// ListUnfinished is List of the tasks not finished yet (scheduled,
// running, waiting on their canary), however old.
func (s *Service) ListUnfinished(ctx context.Context, before int64, limit int) ([]Task, error) {
	return s.list(ctx, s.st.ListUnfinishedReplayTasks, before, limit)
}

func (s *Service) list(ctx context.Context, read func(context.Context, int64, int) ([]store.ReplayTask, error), before int64, limit int) ([]Task, error) {
	limit = min(cmp.Or(limit, 50), 1000)
	if limit < 0 || before < 0 {
		return nil, invalid("limit %d must be between 1 and 1000, before %d must be >= 0", limit, before)
	}
	ts, err := read(ctx, before, limit)
	if err != nil {
		return nil, err
	}
	out := make([]Task, 0, len(ts))
	for _, t := range ts {
		out = append(out, taskOf(t))
	}
	s.withSkipReasons(ctx, out)
	return out, nil
}

// Cancel stops a task within one publish. allow, when set, is asked under
// the task's lock whether the caller may cancel it; its error is returned
// and nothing changes.
func (s *Service) Cancel(ctx context.Context, id int64, actor store.Actor, allow func(Task) error) (Task, error) {
	t, err := s.st.CancelReplayTask(ctx, id, actor, func(t store.ReplayTask) error {
		if allow == nil {
			return nil
		}
		return allow(taskOf(t))
	})
	if err != nil {
		if t.ID != 0 && errors.Is(err, store.ErrConflict) {
			return taskOf(t), err
		}
		return Task{}, err
	}
	s.cancelLocal(id)
	s.log.Info("replay task cancelled", "task_id", id, "actor", actor.Name, "via", actor.Via)
	// A task no runner holds right now has nobody else to do it (its
	// runner, if it has one, does it again once its last outcome is in).
	s.settleStoppedRetries(context.WithoutCancel(ctx), id)
	if again, err := s.st.GetReplayTask(ctx, id); err == nil {
		t = again
	}
	out := []Task{taskOf(t)}
	s.withSkipReasons(ctx, out)
	return out[0], nil
}

func taskOf(t store.ReplayTask) Task {
	out := Task{
		ID: t.ID, Status: t.Status, Requested: t.Requested, Claimed: t.Claimed, Published: t.Published,
		Failed: t.Failed, Skipped: t.Skipped, Unknown: t.Unknown, Remaining: t.Remaining(),
		Republished: t.Republished,
		Error:       t.Error, CreatedBy: t.CreatedBy, CreatedAt: t.CreatedAt.UTC(), StartAt: t.StartAt.UTC(),
		Outcome:    TaskOutcome(t.Status, t.Published, t.Failed, t.Unknown, t.Remaining()),
		ApprovalID: t.ApprovalID, ApprovedBy: t.ApprovedBy,
	}
	if t.FinishedAt != nil {
		f := t.FinishedAt.UTC()
		out.FinishedAt = &f
	}
	if t.RequestedAt != nil {
		r := t.RequestedAt.UTC()
		out.RequestedAt = &r
	}
	if len(t.CanaryIDs) > 0 {
		out.CanaryIDs = t.CanaryIDs
	}
	_ = json.Unmarshal(t.Request, &out.Request)
	// The scope is not part of the request's JSON; it comes back from the
	// task's own column, on the request and on its filter.
	out.Request.Scope = t.Scope
	if out.Request.Filter != nil {
		out.Request.Filter.Scope = t.Scope
	}
	// An edit's task selects the one message it edits (Request.Edit).
	if len(t.Edit) > 0 && len(out.Request.IDs) == 1 {
		out.EditOf = out.Request.IDs[0]
	}
	return out
}
