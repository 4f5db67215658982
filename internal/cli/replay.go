package cli

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlq/dlq/control"
	"github.com/dlq/dlq/internal/timefmt"
	"github.com/dlq/dlq/replay"
)

// Replay runs `dlq replay [flags] [id ...]`.
func Replay(args []string) int {
	var f replayFlags
	cfg, _, pos, code := LoadConfig("replay", args, f.register)
	if code >= 0 {
		return code
	}
	ids, err := replayIDs(pos)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlq replay: %v\n", err)
		return ExitUsage
	}
	req, err := f.request(ids, time.Now())
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlq replay: %v\n", err)
		return ExitUsage
	}
	rf := f.rf

	ctx, stop := signalContext()
	defer stop()
	c, code := rpc(ctx, "replay", cfg, rf)
	if code >= 0 {
		return code
	}
	defer c.Close()
	res, code := send(ctx, "replay", c, control.Command{Command: control.CmdReplay, CommandID: f.commandID, Request: req, Confirm: f.confirm}, rf.timeout)
	if code >= 0 {
		return code
	}
	// A replay above the approval threshold did not start: it waits for
	// approval, with no task to follow (--wait or not).
	if approvalOf(res) != nil {
		if rf.json {
			printJSON(res)
		} else {
			waitsForApproval(os.Stdout, res)
		}
		return ExitOK
	}
	var task replay.Task
	if err := json.Unmarshal(res, &task); err != nil {
		fmt.Fprintf(os.Stderr, "dlq replay: decode answer: %v\n", err)
		return ExitFailure
	}
	switch {
	case task.DryRun:
		if rf.json {
			printJSON(res)
		} else {
			fmt.Printf("dry run: %d messages match, %d would be skipped%s; nothing was changed\n", task.Requested, task.Skipped, skipReasons(task.SkipReasons))
			if len(task.Sample) > 0 {
				fmt.Printf("first ids: %s\n", joinInts(task.Sample))
			}
			if task.Error != "" {
				fmt.Println(task.Error)
			}
			printDryRunApproval(os.Stdout, task.DryRunApproval)
		}
		return ExitOK
	case !f.wait:
		if rf.json {
			printJSON(res)
		} else {
			fmt.Printf("replay task %d %s: %d messages selected, starting %s\n", task.ID, task.Status, task.Requested, timefmt.Human(task.StartAt))
			fmt.Printf("follow it with: dlq replays %d    stop it with: dlq cancel %d\n", task.ID, task.ID)
		}
		return ExitOK
	}
	return waitTask(ctx, c, task, rf)
}

// replayFlags are dlq replay's flags.
type replayFlags struct {
	rf                           rpcFlags
	ff                           filterFlags
	commandID, startAt           string
	delay, canaryWait            time.Duration
	limit, canary                int
	rate                         float64
	toExchange, toKey, onUnknown string
	toExchangeSet                bool
	dryRun, force, wait, confirm bool
}

func (f *replayFlags) register(fs *flag.FlagSet) {
	f.rf.register(fs)
	f.ff.register(fs)
	fs.IntVar(&f.limit, "limit", 0, "replay at most this many (oldest first)")
	fs.Float64Var(&f.rate, "rate", 0, "messages per second (default: as fast as confirms allow)")
	fs.DurationVar(&f.delay, "delay", 0, "start after this long (e.g. 10m)")
	fs.StringVar(&f.startAt, "start-at", "", "start at this time instead, RFC 3339 (e.g. 2026-05-02T02:00:00Z); the messages are selected now")
	fs.Func("to-exchange", "publish to this `exchange` instead of each message's own (\"\" is the default exchange), "+
		"with routing key \"\" unless --to-routing-key gives one", func(s string) error {
		f.toExchange, f.toExchangeSet = s, true
		return nil
	})
	fs.StringVar(&f.toKey, "to-routing-key", "", "publish with this `routing key` instead of each message's own; "+
		"without --to-exchange it goes to the default exchange \"\", i.e. straight to the queue of that name")
	fs.BoolVar(&f.dryRun, "dry-run", false, "count and sample what would be replayed; change nothing")
	fs.IntVar(&f.canary, "canary", 0, "publish this many first, wait --canary-wait, and stop if any died again")
	fs.DurationVar(&f.canaryWait, "canary-wait", replay.DefaultCanaryWait, "how long to watch the canary")
	fs.BoolVar(&f.force, "force", false, "replay messages the loop guard would skip (already replayed max_replays times)")
	fs.StringVar(&f.onUnknown, "on-unknown", "", "a publish whose confirm never came: retry sends it again (same x-dlq-id and x-dlq-replay-count), hold never does (at most one copy); default replay.on_unknown (retry)")
	fs.BoolVar(&f.wait, "wait", false, "wait for the task to finish, showing its progress on stderr")
	confirmFlag(fs, &f.confirm, "confirm", "replay by filter more messages than the confirmation threshold (api.confirm_above)")
	fs.StringVar(&f.commandID, "command-id", "", "the command's id (default: a new UUID); run again with the same id, the command is not repeated and its first answer is shown")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: dlq replay [flags] [id ...]")
		fmt.Fprintln(fs.Output(), "\nReplay messages by id, or by filter flags. Examples:")
		fmt.Fprintln(fs.Output(), "  dlq replay 42")
		fmt.Fprintln(fs.Output(), "  dlq replay --source-queue orders")
		fmt.Fprintln(fs.Output(), "  dlq replay --source-queue orders --reason rejected --since 1h --rate 50 --wait")
		fmt.Fprintln(fs.Output(), "  dlq replay --source-queue orders --since 2026-05-01T10:00:00Z --until 2026-05-01T11:00:00Z --confirm")
		fmt.Fprintln(fs.Output(), "  dlq replay --source-queue orders --field customer.tier=gold --start-at 2026-05-02T02:00:00Z")
		fmt.Fprintln(fs.Output(), "\nIt is sent to dlq on the control queue (the broker's --amqp-url). "+rpcTokenHelp)
		fmt.Fprintln(fs.Output(), "\nflags:")
		fs.PrintDefaults()
	}
}

// replayIDs reads the message ids, each argument one id or a comma list.
func replayIDs(args []string) ([]int64, error) {
	var ids []int64
	for _, arg := range args {
		for _, part := range strings.Split(arg, ",") {
			if part == "" {
				continue
			}
			id, err := strconv.ParseInt(part, 10, 64)
			if err != nil || id <= 0 {
				return nil, fmt.Errorf("%q is not a message id", part)
			}
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// request is the replay the flags and ids ask for; its error says which
// flag is wrong and how to give it.
func (f *replayFlags) request(ids []int64, now time.Time) (replay.Request, error) {
	switch f.onUnknown {
	case "", replay.OnUnknownRetry, replay.OnUnknownHold:
	default:
		return replay.Request{}, fmt.Errorf("--on-unknown %q must be retry (send a publish whose outcome is unknown again) or hold (never)", f.onUnknown)
	}
	req := replay.Request{Limit: f.limit, RatePerSecond: f.rate, DryRun: f.dryRun, Force: f.force, OnUnknown: f.onUnknown}
	filtered := !f.ff.empty()
	switch {
	case len(ids) > 0 && filtered:
		return replay.Request{}, errors.New("give ids or filter flags, not both")
	case len(ids) > 0:
		req.IDs = ids
	case filtered:
		filter, err := f.ff.storeFilter(now)
		if err != nil {
			return replay.Request{}, err
		}
		req.Filter = filter
	default:
		return replay.Request{}, errors.New("say what to replay: message ids, or filter flags such as --source-queue (see dlq replay -h)")
	}
	if f.delay < 0 || f.delay%time.Second != 0 {
		return replay.Request{}, errors.New("--delay must be a whole number of seconds >= 0")
	}
	req.DelaySeconds = int(f.delay / time.Second)
	if f.startAt != "" {
		at, err := time.Parse(time.RFC3339, f.startAt)
		if err != nil {
			return replay.Request{}, fmt.Errorf("--start-at %q: use an RFC 3339 time such as 2026-05-02T02:00:00Z", f.startAt)
		}
		if f.delay != 0 {
			return replay.Request{}, errors.New("give --delay or --start-at, not both")
		}
		req.StartAt = &at
	}
	if f.toExchangeSet || f.toKey != "" {
		req.Target = &replay.Target{Exchange: f.toExchange, RoutingKey: f.toKey}
	}
	if f.canary > 0 {
		req.Canary = &replay.Canary{Count: f.canary, WaitSeconds: int(f.canaryWait.Round(time.Second) / time.Second)}
	}
	return req, nil
}

// Replays runs `dlq replays [id]`: recent replay tasks, or one.
func Replays(args []string) int {
	var rf rpcFlags
	var limit int
	cfg, _, pos, code := LoadConfig("replays", args, func(fs *flag.FlagSet) {
		rf.register(fs)
		fs.IntVar(&limit, "limit", 20, "how many recent tasks to list")
		fs.Usage = func() {
			fmt.Fprintln(fs.Output(), "usage: dlq replays [flags] [id]\n\nList recent replay tasks, or show one.\n"+rpcTokenHelp+"\n\nflags:")
			fs.PrintDefaults()
		}
	})
	if code >= 0 {
		return code
	}
	var id int64
	if len(pos) > 1 {
		fmt.Fprintf(os.Stderr, "dlq replays: give one task id at most, not %d: %q\n", len(pos), pos)
		return ExitUsage
	}
	if len(pos) == 1 {
		n, err := strconv.ParseInt(pos[0], 10, 64)
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "dlq replays: %q is not a task id\n", pos[0])
			return ExitUsage
		}
		id = n
	}
	ctx, stop := signalContext()
	defer stop()
	c, code := rpc(ctx, "replays", cfg, rf)
	if code >= 0 {
		return code
	}
	defer c.Close()
	if id > 0 {
		res, code := send(ctx, "replays", c, control.Command{Command: control.CmdReplayStatus, ID: id}, rf.timeout)
		if code >= 0 {
			return code
		}
		t, code := printOrDecode[replay.Task]("replays", res, rf.json)
		if code >= 0 {
			return code
		}
		printTask(os.Stdout, t)
		return ExitOK
	}
	res, code := send(ctx, "replays", c, control.Command{Command: control.CmdListReplays, Request: replay.Request{Limit: limit}}, rf.timeout)
	if code >= 0 {
		return code
	}
	list, code := printOrDecode[struct {
		Replays []replay.Task `json:"replays"`
	}]("replays", res, rf.json)
	if code >= 0 {
		return code
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tOUTCOME\tREQUESTED\tPUBLISHED\tFAILED\tSKIPPED\tUNKNOWN\tREPUBLISHED\tREMAINING\tCREATED\tBY")
	for _, t := range list.Replays {
		by := t.CreatedBy
		if t.ApprovedBy != "" {
			by += ", approved by " + t.ApprovedBy
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", t.ID, t.Status, cmp.Or(t.Outcome, "-"), t.Requested, t.Published, t.Failed,
			t.Skipped, t.Unknown, t.Republished, t.Remaining, timefmt.Human(t.CreatedAt), by)
	}
	tw.Flush()
	listFull(os.Stderr, "replays", len(list.Replays), limit)
	return ExitOK
}

// Cancel runs `dlq cancel id`.
func Cancel(args []string) int {
	var rf rpcFlags
	cfg, _, pos, code := LoadConfig("cancel", args, func(fs *flag.FlagSet) {
		rf.register(fs)
		fs.Usage = func() {
			fmt.Fprintln(fs.Output(), "usage: dlq cancel [flags] id\n\nStop a replay task within one publish.\n"+rpcTokenHelp+"\n\nflags:")
			fs.PrintDefaults()
		}
	})
	if code >= 0 {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprintf(os.Stderr, "dlq cancel: give one task id (see dlq replays), not %d\n", len(pos))
		return ExitUsage
	}
	id, err := strconv.ParseInt(pos[0], 10, 64)
	if err != nil || id <= 0 {
		fmt.Fprintf(os.Stderr, "dlq cancel: %q is not a task id\n", pos[0])
		return ExitUsage
	}
	ctx, stop := signalContext()
	defer stop()
	c, code := rpc(ctx, "cancel", cfg, rf)
	if code >= 0 {
		return code
	}
	defer c.Close()
	res, code := send(ctx, "cancel", c, control.Command{Command: control.CmdCancelReplay, ID: id}, rf.timeout)
	if code >= 0 {
		return code
	}
	t, code := printOrDecode[replay.Task]("cancel", res, rf.json)
	if code >= 0 {
		return code
	}
	fmt.Printf("replay task %d cancelled: %d published, %d left pending\n", t.ID, t.Published, t.Remaining)
	return ExitOK
}

// joinInts says ids as a comma list.
func joinInts(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, ", ")
}
