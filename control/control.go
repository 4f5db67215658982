package control

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// Authenticator turns a token into a principal. auth.Authenticator is one.
type Authenticator interface {
	Authenticate(token string) (auth.Principal, error)
}

// rateLimiter is optionally implemented by an Authenticator (auth's is):
// each command takes one request from the principal's limit.
type rateLimiter interface {
	Allow(p auth.Principal) bool
}

// Operations is what the control queue asks of the operations layer;
// *ops.Service implements it. Every rule (role, scope, visibility, the
// confirmation threshold) is the layer's: the handler only decodes,
// calls and encodes.
type Operations interface {
	StartReplay(ctx context.Context, c ops.Caller, r ops.ReplayRequest) (replay.Task, error)
	GetReplay(ctx context.Context, c ops.Caller, id int64) (replay.Task, error)
	ReplayStatus(ctx context.Context, c ops.Caller, id int64) (replay.Task, error)
	ListReplays(ctx context.Context, c ops.Caller, limit int) ([]replay.Task, error)
	CancelReplay(ctx context.Context, c ops.Caller, id int64) (replay.Task, error)
	Acknowledge(ctx context.Context, c ops.Caller, r ops.ActionRequest) (store.ActionResult, error)
	Delete(ctx context.Context, c ops.Caller, r ops.ActionRequest) (store.ActionResult, error)
	ListApprovals(ctx context.Context, c ops.Caller, limit int) ([]store.Approval, error)
	Approve(ctx context.Context, c ops.Caller, id int64) (store.Approval, error)
	Reject(ctx context.Context, c ops.Caller, id int64, reason string) (store.Approval, error)
	Withdraw(ctx context.Context, c ops.Caller, id int64) (store.Approval, error)
	EditReplay(ctx context.Context, c ops.Caller, id int64, r ops.EditRequest) (ops.EditResult, error)
	Policies(ctx context.Context, c ops.Caller) (ops.PoliciesView, error)
	PausePolicy(ctx context.Context, c ops.Caller, name, reason string) (ops.PolicyView, error)
	ResumePolicy(ctx context.Context, c ops.Caller, name string) (ops.PolicyView, error)
	// SealAnswer and OpenAnswer keep a remembered answer sealed when
	// encryption is on: an answer may carry a message.
	SealAnswer(commandID, answer string) (string, error)
	OpenAnswer(commandID, stored string) (string, error)
}

// CommandStore remembers commands by command_id. *store.Store implements it.
type CommandStore interface {
	ReserveCommand(ctx context.Context, commandID, command, principal string, lease time.Duration) (store.CommandReservation, error)
	RenewCommand(ctx context.Context, commandID string, hold store.CommandHold, lease time.Duration) (store.CommandHold, bool, error)
	SaveCommandAnswer(ctx context.Context, commandID, answer string) error
	ForgetCommand(ctx context.Context, commandID string, hold store.CommandHold) (bool, error)
}

// Config configures a Control.
type Config struct {
	// Conn carries commands and answers. Required.
	Conn *broker.Conn
	// Queue is the control queue. Required.
	Queue string
	// Ops runs every command. Required.
	Ops Operations
	// Commands remembers answered commands. Required.
	Commands CommandStore
	// Auth checks the x-dlq-token header. Required. A principal named
	// auth.AnonymousName (what an authenticator with no token configured
	// returns) is refused: the control queue is reachable by anyone who can
	// publish to the broker, so it never runs without a token.
	Auth Authenticator
	// Consumers is how many commands are handled at once. Optional;
	// default 1.
	Consumers int
	// MaxBytes bounds a command's size. Optional; default 1 MiB.
	MaxBytes int
	// CommandLease is how long a command's reservation outlives the last
	// renewal by its handler, which renews it every third of it while the
	// command runs. A delivery of the same command_id waits while the
	// reservation is held (a live handler: it then answers with that
	// handler's answer) and runs the command once it lapses (the handler
	// died). It waits off its consumer, which goes on with other commands
	// meanwhile (up to 32 such waits at once: maxWaiting). Optional; default
	// CommandLeaseDefault.
	CommandLease time.Duration
	// Logger is optional; default slog.Default().
	Logger *slog.Logger
	// Registerer receives dlq_control_commands_total. Optional.
	Registerer prometheus.Registerer
}

// CommandLeaseDefault is Config.CommandLease's default: a command whose
// handler died runs again within about this long of its redelivery.
const CommandLeaseDefault = 30 * time.Second

// Control answers the commands of the control queue.
type Control struct {
	cfg      Config
	log      *slog.Logger
	commands *prometheus.CounterVec
	reply    *replier
}

// New validates cfg and registers the metric.
func New(cfg Config) (*Control, error) {
	switch {
	case cfg.Conn == nil:
		return nil, errors.New("control: Conn is required")
	case cfg.Queue == "":
		return nil, errors.New("control: Queue is required")
	case cfg.Ops == nil:
		return nil, errors.New("control: Ops is required")
	case cfg.Commands == nil:
		return nil, errors.New("control: Commands is required")
	case cfg.Auth == nil:
		return nil, errors.New("control: Auth is required")
	case cfg.Consumers < 0 || cfg.MaxBytes < 0 || cfg.CommandLease < 0:
		return nil, fmt.Errorf("control: Consumers (%d), MaxBytes (%d) and CommandLease (%s) must be >= 0", cfg.Consumers, cfg.MaxBytes, cfg.CommandLease)
	}
	cfg.Consumers = cmp.Or(cfg.Consumers, 1)
	cfg.CommandLease = cmp.Or(cfg.CommandLease, CommandLeaseDefault)
	cfg.MaxBytes = cmp.Or(cfg.MaxBytes, 1<<20)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	commands := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dlq_control_commands_total",
		Help: "Control-queue commands handled, by command (invalid when none could be read) and result (ok, duplicate, approval_pending, or the error code).",
	}, []string{"command", "result"})
	for _, c := range commandNames {
		commands.WithLabelValues(c, "ok")
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(commands); err != nil {
			return nil, fmt.Errorf("control: register metrics: %w", err)
		}
	}
	return &Control{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "control", "queue", cfg.Queue),
		commands: commands,
		reply:    &replier{conn: cfg.Conn},
	}, nil
}

// Run handles commands until ctx ends. Commands go through a Watermill
// router: one handler per consumer on the control queue, each fed by a
// Subscriber on the program's broker.Conn. A repeat of a command still
// running waits for it off its consumer (waiters).
func (c *Control) Run(ctx context.Context) error {
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 30 * time.Second},
		watermill.NewSlogLoggerWithLevelMapping(c.log, map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug}))
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	wctx, stopWaiters := context.WithCancel(ctx)
	w := c.newWaiters(wctx)
	sub := NewSubscriber(c.cfg.Conn, c.log)
	for i := range c.cfg.Consumers {
		router.AddConsumerHandler(fmt.Sprintf("control-%d", i), c.cfg.Queue, sub, func(msg *message.Message) error {
			return c.handleMessage(w, msg)
		})
	}
	defer c.reply.close()
	c.log.Info("control queue listening", "consumers", c.cfg.Consumers)
	err = router.Run(ctx)
	stopWaiters()
	w.wait()
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	return sub.Close()
}

// outcome is a command's answer, the command's name ("" if unreadable)
// and the result label (ok, duplicate, approval_pending, or an error code).
type outcome struct{ answer, command, result string }

// handleMessage answers one command and always returns nil: every
// command, however malformed, is answered and acknowledged, never retried.
// A repeat of a command still running is handed to w, with its delivery,
// which it answers and acknowledges once the first is answered.
func (c *Control) handleMessage(w *waiters, msg *message.Message) error {
	ctx := msg.Context()
	var out outcome
	handedOff := false
	defer func() {
		if r := recover(); r != nil {
			out = c.panicked(r, msg.Payload)
		}
		if !handedOff {
			c.respond(ctx, msg.Metadata.Get(MetaReplyTo), msg.Metadata.Get(MetaCorrelationID), out)
		}
	}()
	p, done := c.admit(ctx, msg.Payload, tokenOf(msg))
	switch {
	case done != nil:
		out = *done
	case p.running() && w.take(msg, p):
		handedOff = true
	default:
		out = c.finish(ctx, p)
	}
	return nil
}

// panicked is the answer of a command whose handling panicked outside of
// its execution (safeExecute recovers that): a bug in reading one. The
// answer names the command_id if it can.
func (c *Control) panicked(r any, body []byte) outcome {
	c.log.Error("control command handler panicked", "panic", r, "stack", string(debug.Stack()))
	salvaged := salvage(body)
	return outcome{
		answer:  errAnswer(salvaged.CommandID, cmdErr(CodeInternal, "internal error; retry with the same command_id")),
		command: salvaged.Command, result: CodeInternal,
	}
}

// respond counts a command's outcome and sends its answer to replyTo.
func (c *Control) respond(ctx context.Context, replyTo, corr string, out outcome) {
	c.commands.WithLabelValues(cmp.Or(out.command, "invalid"), out.result).Inc()
	if replyTo == "" {
		c.log.Debug("control command has no reply_to; answer dropped", "result", out.result)
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := c.reply.send(sctx, replyTo, corr, []byte(out.answer)); err != nil {
		c.log.Warn("cannot send control answer; the client may retry with the same command_id", "reply_to", replyTo, "error", err)
	}
}

// tokenOf reads the token header from the lossless header JSON: a token
// sent as bytes counts as well as one sent as a string.
func tokenOf(msg *message.Message) string {
	h, err := broker.DecodeHeadersJSON([]byte(msg.Metadata.Get(MetaHeaders)))
	if err != nil {
		return ""
	}
	switch v := h[TokenHeader].(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return ""
}

// Handle runs one command and returns its answer, the command's name ("" if
// unreadable) and the result label (ok, duplicate, approval_pending, or an
// error code). A repeat of a command still running waits for it
// (Config.CommandLease).
func (c *Control) Handle(ctx context.Context, body []byte, token string) (answer, command, result string) {
	p, done := c.admit(ctx, body, token)
	if done == nil {
		out := c.finish(ctx, p)
		done = &out
	}
	return done.answer, done.command, done.result
}

// pending is a mutating command admitted and looked up by its command_id,
// not answered yet.
type pending struct {
	cmd    Command
	caller ops.Caller
	res    store.CommandReservation
	err    error // of the look-up
}

// running reports whether another handler holds the command right now.
func (p pending) running() bool { return p.err == nil && p.res.Running }

// admit reads, authenticates and authorizes a command and answers it if it
// changes nothing (a read, a refusal). Otherwise it looks the command up by
// its command_id, reserving it when new, and returns it pending (nil
// outcome) for finish.
func (c *Control) admit(ctx context.Context, body []byte, token string) (pending, *outcome) {
	cmd, perr := ParseCommand(body, c.cfg.MaxBytes)
	if perr != nil {
		return pending{}, &outcome{errAnswer(cmd.CommandID, perr), cmd.Command, perr.Code}
	}
	fail := func(e *CommandError) (pending, *outcome) {
		return pending{}, &outcome{errAnswer(cmd.CommandID, e), cmd.Command, e.Code}
	}
	p, aerr := c.authenticate(token)
	if aerr != nil {
		return fail(aerr)
	}
	if rl, ok := c.cfg.Auth.(rateLimiter); ok && !rl.Allow(p) {
		return fail(cmdErr(CodeRateLimited, "too many commands for token %s; slow down", p.Name))
	}
	if err := ops.Authorize(p, actionOf[cmd.Command]); err != nil {
		return fail(cmdErr(CodeForbidden, "%s", err.Error()))
	}
	caller := ops.Caller{Principal: p, Via: ops.ViaControl, RequestID: cmd.CommandID}
	if out, ok := c.read(ctx, cmd, caller); ok {
		return pending{}, &out
	}
	res, err := c.cfg.Commands.ReserveCommand(ctx, cmd.CommandID, cmd.Command, p.Name, c.cfg.CommandLease)
	return pending{cmd: cmd, caller: caller, res: res, err: err}, nil
}

// read answers the commands that only read. They change nothing: no need
// to remember them.
func (c *Control) read(ctx context.Context, cmd Command, caller ops.Caller) (outcome, bool) {
	var out outcome
	switch cmd.Command {
	case CmdReplayStatus:
		t, err := c.cfg.Ops.ReplayStatus(ctx, caller, cmd.ID)
		out.answer, out.command, out.result = c.answer(cmd, t, err)
	case CmdListReplays:
		ts, err := c.cfg.Ops.ListReplays(ctx, caller, cmd.Limit)
		out.answer, out.command, out.result = c.answer(cmd, map[string]any{"replays": ts}, err)
	case CmdListApprovals:
		as, err := c.cfg.Ops.ListApprovals(ctx, caller, cmd.Limit)
		out.answer, out.command, out.result = c.answer(cmd, map[string]any{"approvals": as}, err)
	case CmdListPolicies:
		v, err := c.cfg.Ops.Policies(ctx, caller)
		out.answer, out.command, out.result = c.answer(cmd, v, err)
	default:
		return outcome{}, false
	}
	return out, true
}

// finish answers a pending command: once another handler running it
// answered or died (reserve), with the first answer, or by running it.
func (c *Control) finish(ctx context.Context, p pending) outcome {
	cmd, caller := p.cmd, p.caller
	if p.running() {
		p.res, p.err = c.reserve(ctx, cmd, caller.Principal.Name)
	}
	fail := func(e *CommandError) outcome { return outcome{errAnswer(cmd.CommandID, e), cmd.Command, e.Code} }
	res := p.res
	switch {
	case p.err != nil:
		return fail(cmdErr(CodeUnavailable, "cannot record the command (database unavailable); retry with the same command_id"))
	case !res.Reserved && (res.Principal != caller.Principal.Name || res.Command != cmd.Command):
		return fail(cmdErr(CodeConflict, "command_id %q was already used for another command; use a new id per command", cmd.CommandID))
	case !res.Reserved:
		answer, err := c.cfg.Ops.OpenAnswer(cmd.CommandID, res.Answer)
		if err != nil {
			c.log.Error("cannot open the remembered answer of a repeated command", "command_id", cmd.CommandID, "error", err)
			return fail(cmdErr(CodeInternal, "the first answer of command %q cannot be read: %v", cmd.CommandID, err))
		}
		return outcome{answer, cmd.Command, "duplicate"}
	}
	return c.run(ctx, cmd, caller, res.Hold)
}

// run runs a command reserved here, under hold, and records its answer.
func (c *Control) run(ctx context.Context, cmd Command, caller ops.Caller, hold store.CommandHold) outcome {
	stopRenewing := c.renew(ctx, cmd.CommandID, hold)
	answer, command, result := c.safeExecute(ctx, cmd, caller)
	hold = stopRenewing()
	out := outcome{answer, command, result}
	if result == CodeUnavailable || result == CodeInternal || result == CodeConfirmRequired {
		// Nothing was done: let a retry run it again (a refusal asking for
		// confirm: true is retried with it, often under the same id).
		c.forget(context.WithoutCancel(ctx), cmd.CommandID, hold)
		return out
	}
	if result == "ok" && cmd.Command == CmdReplay && !cmd.DryRun {
		return out // recorded with the task
	}
	stored, err := c.cfg.Ops.SealAnswer(cmd.CommandID, answer)
	if err == nil {
		err = c.cfg.Commands.SaveCommandAnswer(context.WithoutCancel(ctx), cmd.CommandID, stored)
	}
	if err != nil {
		c.log.Warn("cannot record a command's answer; a repeat will run it again after its reservation expires",
			"command_id", cmd.CommandID, "error", err)
	}
	return out
}

// reserve reserves cmd's command_id for principal, or returns its first
// answer. While another handler holds it (a redelivery racing its first
// delivery: the channel closed, or another instance, while that handler
// still works) it waits, for as long as that handler renews the
// reservation: it then returns that handler's answer. A reservation that
// lapses (its handler died, or could not reach the database) is taken
// over, and the command runs here. Answering "still running" instead
// acknowledged the delivery, and a command whose handler had died was
// lost. A consumer hands this wait to its waiters, so that it goes on
// with other commands meanwhile.
func (c *Control) reserve(ctx context.Context, cmd Command, principal string) (store.CommandReservation, error) {
	for {
		res, err := c.cfg.Commands.ReserveCommand(ctx, cmd.CommandID, cmd.Command, principal, c.cfg.CommandLease)
		if err != nil || !res.Running {
			return res, err
		}
		select {
		case <-ctx.Done():
			return res, context.Cause(ctx)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// renew keeps the reservation of commandID, hold, while its command runs,
// so that a command running longer than the lease (a bulk delete, a large
// replay's snapshot) is not taken over and run a second time by a repeat.
// The returned func stops it and returns the hold as last renewed.
func (c *Control) renew(ctx context.Context, commandID string, hold store.CommandHold) (stop func() store.CommandHold) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(c.cfg.CommandLease / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				next, held, err := c.cfg.Commands.RenewCommand(context.WithoutCancel(ctx), commandID, hold, c.cfg.CommandLease)
				switch {
				case errors.Is(err, store.ErrCommandAnswered):
					// The command saved its answer in its own
					// transaction and is about to return.
					return
				case err != nil:
					c.log.Warn("cannot renew a running command's reservation; a repeat may run it again once it lapses",
						"command_id", commandID, "error", err)
				case !held:
					// Lapsed (the database was out of reach longer than
					// the lease) and taken over: renewing by command_id
					// would extend the repeat's reservation as this one's.
					c.log.Warn("a running command is no longer reserved here: its reservation lapsed, and a repeat took it over or answered it; it may run twice",
						"command_id", commandID)
					return
				default:
					hold = next
				}
			}
		}
	}()
	return func() store.CommandHold { close(done); <-finished; return hold }
}

// forget drops the reservation hold of commandID, so that a retry runs the
// command, unless a repeat took it over meanwhile: that repeat's
// reservation stays, and a retry waits for it.
func (c *Control) forget(ctx context.Context, commandID string, hold store.CommandHold) {
	forgot, err := c.cfg.Commands.ForgetCommand(ctx, commandID, hold)
	switch {
	case err != nil:
		c.log.Warn("cannot forget a command that did nothing; a retry will run it once its reservation expires",
			"command_id", commandID, "error", err)
	case !forgot:
		c.log.Debug("a command that did nothing is no longer reserved here (taken over, or answered); nothing to forget",
			"command_id", commandID)
	}
}

func (c *Control) authenticate(token string) (auth.Principal, *CommandError) {
	if token == "" {
		return auth.Principal{}, cmdErr(CodeMissingToken, "missing token: send it in the %s header", TokenHeader)
	}
	p, err := c.cfg.Auth.Authenticate(token)
	if err != nil {
		return auth.Principal{}, cmdErr(CodeInvalidToken, "invalid token")
	}
	if p.Name == auth.AnonymousName {
		return auth.Principal{}, cmdErr(CodeInvalidToken, "no token is configured, so the control queue accepts no command: set DLQ_ADMIN_TOKEN or api.tokens")
	}
	return p, nil
}

// safeExecute is execute, with a panic turned into an internal error
// answer: the command is acknowledged like any other, its reservation is
// forgotten (a retry with the same command_id runs it again), and the
// consumer goes on with the next command.
func (c *Control) safeExecute(ctx context.Context, cmd Command, caller ops.Caller) (answer, command, result string) {
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("control command panicked", "command", cmd.Command, "command_id", cmd.CommandID,
				"panic", r, "stack", string(debug.Stack()))
			answer = errAnswer(cmd.CommandID, cmdErr(CodeInternal, "internal error while running %s; retry with the same command_id", cmd.Command))
			command, result = cmd.Command, CodeInternal
		}
	}()
	return c.execute(ctx, cmd, caller)
}

func (c *Control) execute(ctx context.Context, cmd Command, caller ops.Caller) (string, string, string) {
	switch cmd.Command {
	case CmdReplay:
		r := ops.ReplayRequest{Request: cmd.Request, Confirm: cmd.Confirm, Command: &ops.CommandRecord{
			ID:     cmd.CommandID,
			Answer: func(t replay.Task) (string, error) { return okAnswer(cmd.CommandID, t) },
		}}
		t, err := c.cfg.Ops.StartReplay(ctx, caller, r)
		return c.answer(cmd, t, err)
	case CmdCancelReplay:
		t, err := c.cfg.Ops.CancelReplay(ctx, caller, cmd.ID)
		return c.answer(cmd, t, err)
	case CmdAcknowledge, CmdDelete:
		r := ops.ActionRequest{IDs: cmd.IDs, Filter: cmd.Filter, Limit: cmd.Limit, DryRun: cmd.DryRun, Confirm: cmd.Confirm}
		act := c.cfg.Ops.Acknowledge
		if cmd.Command == CmdDelete {
			act = c.cfg.Ops.Delete
		}
		res, err := act(ctx, caller, r)
		return c.answer(cmd, res, err)
	case CmdEditReplay:
		res, err := c.cfg.Ops.EditReplay(ctx, caller, cmd.ID, ops.EditRequest{BodyBase64: cmd.BodyBase64, Body: cmd.Body,
			SetHeaders: cmd.SetHeaders, RemoveHeaders: cmd.RemoveHeaders, Force: cmd.Force, DryRun: cmd.DryRun})
		return c.answer(cmd, res, err)
	case CmdApprove:
		a, err := c.cfg.Ops.Approve(ctx, caller, cmd.ID)
		return c.answer(cmd, a, err)
	case CmdReject:
		a, err := c.cfg.Ops.Reject(ctx, caller, cmd.ID, cmd.Reason)
		return c.answer(cmd, a, err)
	case CmdWithdraw:
		a, err := c.cfg.Ops.Withdraw(ctx, caller, cmd.ID)
		return c.answer(cmd, a, err)
	case CmdPausePolicy:
		v, err := c.cfg.Ops.PausePolicy(ctx, caller, cmd.Name, cmd.Reason)
		return c.answer(cmd, v, err)
	case CmdResumePolicy:
		v, err := c.cfg.Ops.ResumePolicy(ctx, caller, cmd.Name)
		return c.answer(cmd, v, err)
	}
	return c.answer(cmd, nil, cmdErr(CodeUnknownCommand, "command %q is not handled", cmd.Command))
}

// answer builds the answer of an executed command, mapping errors to
// their public codes.
func (c *Control) answer(cmd Command, result any, err error) (string, string, string) {
	var pa *ops.PendingApproval
	if errors.As(err, &pa) {
		// Not a failure: the request waits for a second principal's
		// approval; the answer says which request. It has its own result
		// label, so that it is recorded like any answer (a replay's "ok"
		// is recorded with its task, and no task was made).
		a, merr := okAnswer(cmd.CommandID, map[string]any{"approval": pa.Approval})
		if merr == nil {
			return a, cmd.Command, ResultApprovalPending
		}
		err = merr
	}
	if err == nil {
		a, merr := okAnswer(cmd.CommandID, result)
		if merr == nil {
			return a, cmd.Command, "ok"
		}
		err = merr
	}
	e := errorCode(err)
	if e.Code == CodeInternal || e.Code == CodeUnavailable {
		c.log.Error("control command failed", "command", cmd.Command, "command_id", cmd.CommandID, "error", err)
	}
	return errAnswer(cmd.CommandID, e), cmd.Command, e.Code
}

// errorCode maps an error to its public code and message: the
// operations layer's classification, in the control queue's words.
func errorCode(err error) *CommandError {
	var ce *CommandError
	if errors.As(err, &ce) {
		return ce
	}
	switch ops.Classify(err) {
	case ops.CodeForbidden:
		e := cmdErr(CodeForbidden, "%s", ops.Message(err))
		e.Reason = ops.Reason(err)
		return e
	case ops.CodeConfirmRequired:
		return cmdErr(CodeConfirmRequired, "%s", ops.Message(err))
	case ops.CodeInvalid:
		return cmdErr(CodeInvalidRequest, "%s", ops.Message(err))
	case ops.CodeNotFound:
		return cmdErr(CodeNotFound, "%s", ops.Message(err))
	case ops.CodeConflict:
		return cmdErr(CodeConflict, "%s", ops.Message(err))
	case ops.CodeUnavailable:
		return cmdErr(CodeUnavailable, "%s; retry with the same command_id", ops.Message(err))
	case ops.CodeCanceled, ops.CodeTimeout:
		return cmdErr(CodeUnavailable, "interrupted (dlq is stopping); retry with the same command_id")
	}
	return cmdErr(CodeUnavailable, "the database failed; retry with the same command_id")
}
