package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Replay configures replay tasks and the control queue.
//
//	replay:
//	  max_replays: 5             # loop guard; a request with force: true lifts it
//	  lease: 30s                 # claims and task runners unrenewed this long are taken back
//	  batch_size: 500            # messages claimed per transaction
//	  window: 1000               # publishes awaiting their confirm, per task
//	  max_tasks: 4               # tasks one instance runs at once
//	  max_task_messages: 1000000 # largest selection without an explicit limit
//	  poll_interval: 1s          # how often an idle runner looks for due tasks
//	  confirm_timeout: 2m        # a publish unconfirmed this long is recorded as unknown
//	  keep_user_id: false        # republish the user_id property (see KeepUserID)
//	  on_unknown: retry          # send a publish whose outcome is unknown again (retry) or never (hold)
//	  unknown_retries: 3         # how often at most, per message and task
//	  control_consumers: 1       # control commands handled at once
//	  control_max_bytes: 1048576 # largest control command
//	  edit_locked_headers: []    # headers an edit-then-replay may never change
//	  edit_sensitive_headers: [] # headers an edit-then-replay changes only with force: true
type Replay struct {
	// MaxReplays skips messages already replayed this many times, unless
	// a request says force. Env DLQ_REPLAY_MAX_REPLAYS.
	MaxReplays int `yaml:"max_replays"`
	// Lease is how long a claim or a task runner holds without renewal.
	// Env DLQ_REPLAY_LEASE.
	Lease Duration `yaml:"lease"`
	// BatchSize is the most messages claimed per transaction. Env
	// DLQ_REPLAY_BATCH_SIZE.
	BatchSize int `yaml:"batch_size"`
	// Window bounds the publishes awaiting their confirm per task. Env
	// DLQ_REPLAY_WINDOW.
	Window int `yaml:"window"`
	// MaxTasks bounds the tasks one instance runs at once. Env
	// DLQ_REPLAY_MAX_TASKS.
	MaxTasks int `yaml:"max_tasks"`
	// MaxTaskMessages is the largest selection a task takes without an
	// explicit limit. Env DLQ_REPLAY_MAX_TASK_MESSAGES.
	MaxTaskMessages int64 `yaml:"max_task_messages"`
	// PollInterval is how often an idle runner looks for due tasks (a new
	// task also wakes runners at once). Env DLQ_REPLAY_POLL_INTERVAL.
	PollInterval Duration `yaml:"poll_interval"`
	// ConfirmTimeout is how long a replayed message waits for its publisher
	// confirm before its outcome is recorded as unknown (back to pending,
	// not published again by its task); the channel is closed then, so the
	// other publishes in flight on it end unknown too. Time spent blocked by
	// a RabbitMQ alarm does not count. Env DLQ_REPLAY_CONFIRM_TIMEOUT.
	ConfirmTimeout Duration `yaml:"confirm_timeout"`
	// KeepUserID republishes the stored user_id property. By default it is
	// dropped: RabbitMQ refuses a publish whose user_id differs from the
	// connection's user (PRECONDITION_FAILED, which closes the channel and
	// ends every publish in flight on it as unknown). Keep it only when dlq
	// connects as the same user as the applications, or as a user with the
	// impersonator tag. Env DLQ_REPLAY_KEEP_USER_ID.
	KeepUserID bool `yaml:"keep_user_id"`
	// OnUnknown is what a replay task does with a publish whose confirm
	// never came (connection or node lost, confirm timeout, dlq killed),
	// unless its request says: retry sends it again once the connection is
	// back (same x-dlq-id and x-dlq-replay-count, a new x-dlq-replay-id),
	// hold never does (at most one copy; the message stays pending as
	// unknown). Env DLQ_REPLAY_ON_UNKNOWN.
	OnUnknown string `yaml:"on_unknown"`
	// UnknownRetries bounds how often a task with on_unknown retry sends
	// one message again: at most 1 + UnknownRetries copies of it can
	// arrive. Env DLQ_REPLAY_UNKNOWN_RETRIES.
	UnknownRetries int `yaml:"unknown_retries"`
	// ControlConsumers is how many control commands are handled at once.
	// Env DLQ_CONTROL_CONSUMERS.
	ControlConsumers int `yaml:"control_consumers"`
	// ControlMaxBytes bounds a control command's size. Env
	// DLQ_CONTROL_MAX_BYTES.
	ControlMaxBytes int `yaml:"control_max_bytes"`
	// EditLockedHeaders may never be changed by an edit-then-replay, besides
	// dlq's own (x-dlq-*) and the broker's death headers, which never may.
	// Env DLQ_EDIT_LOCKED_HEADERS (comma list).
	EditLockedHeaders []string `yaml:"edit_locked_headers"`
	// EditSensitiveHeaders are changed by an edit-then-replay only with
	// force: true. Env DLQ_EDIT_SENSITIVE_HEADERS (comma list).
	EditSensitiveHeaders []string `yaml:"edit_sensitive_headers"`
}

// Replay defaults.
const (
	ReplayMaxReplaysDefault      = 5
	ReplayLeaseDefault           = 30 * time.Second
	ReplayBatchSizeDefault       = 500
	ReplayWindowDefault          = 1000
	ReplayMaxTasksDefault        = 4
	ReplayMaxTaskMessagesDefault = 1_000_000
	ReplayPollIntervalDefault    = time.Second
	ReplayConfirmTimeoutDefault  = 2 * time.Minute
	ReplayOnUnknownDefault       = "retry"
	ReplayUnknownRetriesDefault  = 3
	ControlConsumersDefault      = 1
	ControlMaxBytesDefault       = 1 << 20
)

func defaultReplay() Replay {
	return Replay{
		MaxReplays:       ReplayMaxReplaysDefault,
		Lease:            Duration(ReplayLeaseDefault),
		BatchSize:        ReplayBatchSizeDefault,
		Window:           ReplayWindowDefault,
		MaxTasks:         ReplayMaxTasksDefault,
		MaxTaskMessages:  ReplayMaxTaskMessagesDefault,
		PollInterval:     Duration(ReplayPollIntervalDefault),
		ConfirmTimeout:   Duration(ReplayConfirmTimeoutDefault),
		OnUnknown:        ReplayOnUnknownDefault,
		UnknownRetries:   ReplayUnknownRetriesDefault,
		ControlConsumers: ControlConsumersDefault,
		ControlMaxBytes:  ControlMaxBytesDefault,
	}
}

// replayEnvVars lists the environment variables of the replay section.
func replayEnvVars() []envVar {
	return []envVar{
		{"DLQ_EDIT_LOCKED_HEADERS", listVar(func(c *Config) *[]string { return &c.Replay.EditLockedHeaders })},
		{"DLQ_EDIT_SENSITIVE_HEADERS", listVar(func(c *Config) *[]string { return &c.Replay.EditSensitiveHeaders })},
		{"DLQ_REPLAY_MAX_REPLAYS", intVar("DLQ_REPLAY_MAX_REPLAYS", func(c *Config) *int { return &c.Replay.MaxReplays })},
		{"DLQ_REPLAY_LEASE", durVar("DLQ_REPLAY_LEASE", func(c *Config) *Duration { return &c.Replay.Lease })},
		{"DLQ_REPLAY_BATCH_SIZE", intVar("DLQ_REPLAY_BATCH_SIZE", func(c *Config) *int { return &c.Replay.BatchSize })},
		{"DLQ_REPLAY_WINDOW", intVar("DLQ_REPLAY_WINDOW", func(c *Config) *int { return &c.Replay.Window })},
		{"DLQ_REPLAY_MAX_TASKS", intVar("DLQ_REPLAY_MAX_TASKS", func(c *Config) *int { return &c.Replay.MaxTasks })},
		{"DLQ_REPLAY_MAX_TASK_MESSAGES", int64Var("DLQ_REPLAY_MAX_TASK_MESSAGES", func(c *Config) *int64 { return &c.Replay.MaxTaskMessages })},
		{"DLQ_REPLAY_POLL_INTERVAL", durVar("DLQ_REPLAY_POLL_INTERVAL", func(c *Config) *Duration { return &c.Replay.PollInterval })},
		{"DLQ_REPLAY_CONFIRM_TIMEOUT", durVar("DLQ_REPLAY_CONFIRM_TIMEOUT", func(c *Config) *Duration { return &c.Replay.ConfirmTimeout })},
		{"DLQ_REPLAY_KEEP_USER_ID", replayBoolVar("replay.keep_user_id", "DLQ_REPLAY_KEEP_USER_ID", func(c *Config) *bool { return &c.Replay.KeepUserID })},
		{"DLQ_REPLAY_ON_UNKNOWN", strVar(func(c *Config) *string { return &c.Replay.OnUnknown })},
		{"DLQ_REPLAY_UNKNOWN_RETRIES", intVar("DLQ_REPLAY_UNKNOWN_RETRIES", func(c *Config) *int { return &c.Replay.UnknownRetries })},
		{"DLQ_CONTROL_CONSUMERS", intVar("DLQ_CONTROL_CONSUMERS", func(c *Config) *int { return &c.Replay.ControlConsumers })},
		{"DLQ_CONTROL_MAX_BYTES", intVar("DLQ_CONTROL_MAX_BYTES", func(c *Config) *int { return &c.Replay.ControlMaxBytes })},
	}
}

func replayBoolVar(key, name string, dst func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, v string) error {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("config: %s / %s %q is not a boolean (true or false)", key, name, v)
		}
		*dst(c) = b
		return nil
	}
}

// validateReplay checks the replay section.
func (c *Config) validateReplay() []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("config: "+format, a...)) }
	r := c.Replay
	if r.MaxReplays < 1 {
		bad("replay.max_replays / DLQ_REPLAY_MAX_REPLAYS %d must be >= 1", r.MaxReplays)
	}
	if r.Lease.D() < time.Second || r.Lease.D() > time.Hour {
		bad("replay.lease / DLQ_REPLAY_LEASE %s must be between 1s and 1h", r.Lease.D())
	}
	if r.BatchSize < 1 || r.BatchSize > 10000 {
		bad("replay.batch_size / DLQ_REPLAY_BATCH_SIZE %d must be between 1 and 10000", r.BatchSize)
	}
	if r.Window < 1 || r.Window > 65535 {
		bad("replay.window / DLQ_REPLAY_WINDOW %d must be between 1 and 65535", r.Window)
	}
	if r.MaxTasks < 1 || r.MaxTasks > 64 {
		bad("replay.max_tasks / DLQ_REPLAY_MAX_TASKS %d must be between 1 and 64", r.MaxTasks)
	}
	if r.MaxTaskMessages < 1 {
		bad("replay.max_task_messages / DLQ_REPLAY_MAX_TASK_MESSAGES %d must be >= 1", r.MaxTaskMessages)
	}
	if r.PollInterval.D() < 10*time.Millisecond || r.PollInterval.D() > time.Minute {
		bad("replay.poll_interval / DLQ_REPLAY_POLL_INTERVAL %s must be between 10ms and 1m", r.PollInterval.D())
	}
	if r.ConfirmTimeout.D() < time.Second || r.ConfirmTimeout.D() > time.Hour {
		bad("replay.confirm_timeout / DLQ_REPLAY_CONFIRM_TIMEOUT %s must be between 1s and 1h", r.ConfirmTimeout.D())
	}
	if !ValidOnUnknown(r.OnUnknown) {
		bad("replay.on_unknown / DLQ_REPLAY_ON_UNKNOWN %q must be retry (send a publish whose outcome is unknown again) or hold (never)", r.OnUnknown)
	}
	if r.UnknownRetries < 1 || r.UnknownRetries > 10 {
		bad("replay.unknown_retries / DLQ_REPLAY_UNKNOWN_RETRIES %d must be between 1 and 10", r.UnknownRetries)
	}
	if r.ControlConsumers < 1 || r.ControlConsumers > 64 {
		bad("replay.control_consumers / DLQ_CONTROL_CONSUMERS %d must be between 1 and 64", r.ControlConsumers)
	}
	if r.ControlMaxBytes < 1024 {
		bad("replay.control_max_bytes / DLQ_CONTROL_MAX_BYTES %d must be >= 1024", r.ControlMaxBytes)
	}
	return errs
}

// ValidOnUnknown reports whether v is a value of replay.on_unknown (and of
// a policy's on_unknown): retry or hold.
func ValidOnUnknown(v string) bool {
	return v == "retry" || v == "hold"
}
