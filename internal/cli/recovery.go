package cli

import (
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/dlq/dlq/cron"
	"github.com/dlq/dlq/internal/timefmt"
	"github.com/dlq/dlq/store"
)

// The commands of recovery beyond a manual replay (docs/REPLAY.md,
// "Recovery"): four-eyes approval, edit-then-replay and the automatic
// replay policies, over the HTTP API like ls and ack.

// Approvals runs `dlq approvals`: the requests waiting for approval, and
// the decided ones.
func Approvals(args []string) int { return runApprovals(args, osEnv()) }

// Approve runs `dlq approve ID`.
func Approve(args []string) int { return runDecide("approve", args, osEnv()) }

// Reject runs `dlq reject ID [--reason TEXT]`.
func Reject(args []string) int { return runDecide("reject", args, osEnv()) }

// Withdraw runs `dlq withdraw ID`: take back one's own request.
func Withdraw(args []string) int { return runDecide("withdraw", args, osEnv()) }

// EditReplay runs `dlq edit-replay ID`: send a corrected copy.
func EditReplay(args []string) int { return runEditReplay(args, osEnv(), os.Stdin) }

// Policies runs `dlq policies`: the automatic replay policies.
func Policies(args []string) int { return runPolicies(args, osEnv()) }

// Policy runs `dlq policy pause|resume NAME`.
func Policy(args []string) int { return runPolicy(args, osEnv()) }

// waitsForApproval prints the request an answer holds when the action
// became a request for approval (above api.approval_above) instead of
// running, and reports whether it did.
func waitsForApproval(w io.Writer, answer []byte) bool {
	a := approvalOf(answer)
	if a == nil {
		return false
	}
	fmt.Fprintf(w, "not run: %s of %s messages waits for approval %d (expires %s)\n", a.Action, thousands(a.Count), a.ID,
		timefmt.Human(a.ExpiresAt))
	fmt.Fprintf(w, "another person approves it with: dlq approve %d   (or rejects it: dlq reject %d)\n", a.ID, a.ID)
	fmt.Fprintf(w, "you may take it back with: dlq withdraw %d\n", a.ID)
	return true
}

// printDryRunApproval prints what a dry run's answer says of approval,
// as one line: "approval needed: … waits for admin to approve it …", or
// "approval not needed: …". Nothing for a server that does not say
// (older than the field).
func printDryRunApproval(w io.Writer, a store.DryRunApproval) {
	if a.ApprovalNote != "" {
		fmt.Fprintf(w, "approval %s\n", a.ApprovalNote)
	}
}

// approvalOf is the request for approval an answer holds when the action
// became one instead of running (nil when it ran).
func approvalOf(answer []byte) *store.Approval {
	var r struct {
		Approval *store.Approval `json:"approval"`
	}
	if json.Unmarshal(answer, &r) != nil {
		return nil
	}
	return r.Approval
}

// runDecide approves or rejects a request.
func runDecide(verb string, args []string, env cliEnv) int {
	fs := flag.NewFlagSet("dlq "+verb, flag.ContinueOnError)
	var (
		af     apiFlags
		reason string
	)
	af.register(fs, env)
	if verb == "reject" {
		fs.StringVar(&reason, "reason", "", "why (recorded with the decision)")
	}
	fs.Usage = func() {
		what := map[string]string{
			"approve":  "run a request for approval on its snapshot (you cannot approve your own)",
			"reject":   "turn a request for approval down; nothing runs",
			"withdraw": "take back your own request for approval; nothing runs",
		}[verb]
		fmt.Fprintf(env.stderr, "usage: dlq %s [flags] ID   %s\n", verb, what)
		fs.PrintDefaults()
	}
	id, code := idArg(fs, args, env, "request id")
	if code >= 0 {
		return code
	}
	c := newAPIClient(verb, af, env)
	var q url.Values
	if reason != "" {
		q = url.Values{"reason": {reason}}
	}
	a, code := answer[store.Approval](c, af.json, "POST", fmt.Sprintf("/api/v1/approvals/%d/%s", id, verb), q, nil)
	if code >= 0 {
		return code
	}
	fmt.Fprintf(env.stdout, "approval %d %s: %s of %s messages requested by %s\n", a.ID, a.Status, a.Action, thousands(a.Count), a.RequestedBy)
	printApprovalResult(env.stdout, a)
	return ExitOK
}

// printApprovalResult says what an approved action did, in the words of
// the command that would have run it: the replay task to follow, or the
// counts dlq ack and dlq rm print. A result it does not know is printed
// as it came.
func printApprovalResult(w io.Writer, a store.Approval) {
	if len(a.Result) == 0 {
		return
	}
	var r struct {
		TaskID    int64 `json:"task_id"`
		Requested int64 `json:"requested"`
		store.ActionResult
	}
	if json.Unmarshal(a.Result, &r) == nil {
		past := map[string]string{store.ActionAcknowledge: "acknowledged", store.ActionDelete: "deleted"}[a.Action]
		switch {
		case r.TaskID > 0:
			fmt.Fprintf(w, "replay task %d started for %s messages: follow it with dlq replays %d\n", r.TaskID, thousands(r.Requested), r.TaskID)
			return
		case past != "":
			fmt.Fprintln(w, actionWords(past, r.Changed, r.Unchanged))
			return
		}
	}
	fmt.Fprintf(w, "result: %s\n", a.Result)
}

// idArg parses flags and the command's one argument, an id (flags may
// come before and after it); what names the id in errors ("message id").
func idArg(fs *flag.FlagSet, args []string, env cliEnv, what string) (int64, int) {
	arg, code := oneArg(fs, args, env, what)
	if code >= 0 {
		return 0, code
	}
	id, err := strconv.ParseInt(arg, 10, 64)
	if err != nil || id <= 0 {
		fmt.Fprintf(env.stderr, "%s: %q is not a %s\n", fs.Name(), arg, what)
		return 0, ExitUsage
	}
	return id, -1
}

// oneArg parses flags and the command's one argument (flags may come
// before and after it); what names the argument in errors.
func oneArg(fs *flag.FlagSet, args []string, env cliEnv, what string) (string, int) {
	pos, code := parseArgs(fs, args, env)
	if code >= 0 {
		return "", code
	}
	switch len(pos) {
	case 0:
		fs.Usage()
		return "", ExitUsage
	case 1:
		return pos[0], -1
	}
	fmt.Fprintf(env.stderr, "%s: give one %s, not %d: %q\n", fs.Name(), what, len(pos), pos)
	return "", ExitUsage
}

// headerFlags collects --set-header NAME=VALUE: a value that is JSON (a
// typed value such as {"type":"int32","value":5}, true, null) as it is,
// anything else as a string.
type headerFlags map[string]json.RawMessage

func (h headerFlags) String() string { return "" }

func (h headerFlags) Set(s string) error {
	name, value, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return fmt.Errorf("%q: give NAME=VALUE", s)
	}
	if json.Valid([]byte(value)) && value != "" && (value[0] == '{' || value == "true" || value == "false" || value == "null") {
		h[name] = json.RawMessage(value)
		return nil
	}
	b, err := json.Marshal(value)
	if err != nil {
		return err
	}
	h[name] = b
	return nil
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// runEditReplay sends a corrected copy of a message (or, with --dry-run,
// shows it).
func runEditReplay(args []string, env cliEnv, stdin io.Reader) int {
	fs := flag.NewFlagSet("dlq edit-replay", flag.ContinueOnError)
	var (
		af             apiFlags
		body, bodyFile string
		bodySet        bool
		force, dryRun  bool
		remove         listFlag
		set            = headerFlags{}
	)
	af.register(fs, env)
	fs.Func("body", "the new body, as text (a JSON or text message only)", func(s string) error { body, bodySet = s, true; return nil })
	fs.StringVar(&bodyFile, "body-file", "", "read the new body from this file (- for stdin), byte for byte")
	fs.Var(set, "set-header", "NAME=VALUE: add or replace a header (repeatable); VALUE is a string, or typed JSON such as {\"type\":\"int32\",\"value\":5}")
	fs.Var(&remove, "remove-header", "NAME: drop a header (repeatable)")
	fs.BoolVar(&force, "force", false, "allow changing a header of replay.edit_sensitive_headers")
	fs.BoolVar(&dryRun, "dry-run", false, "show exactly the copy that would be sent; send nothing")
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: dlq edit-replay [flags] ID   send a corrected copy of a message; the original is kept, linked to it")
		fmt.Fprintln(env.stderr, "  dlq edit-replay 4711 --body-file fixed.json --dry-run")
		fmt.Fprintln(env.stderr, "  dlq edit-replay 4711 --set-header x-tenant=acme --remove-header x-retry-hint")
		fs.PrintDefaults()
	}
	id, code := idArg(fs, args, env, "message id")
	if code >= 0 {
		return code
	}
	req := map[string]any{}
	switch {
	case bodySet && bodyFile != "":
		fmt.Fprintln(env.stderr, "dlq edit-replay: give --body or --body-file, not both")
		return ExitUsage
	case bodySet:
		req["body"] = body
	case bodyFile != "":
		var (
			b   []byte
			err error
		)
		if bodyFile == "-" {
			b, err = io.ReadAll(stdin)
		} else {
			b, err = os.ReadFile(bodyFile)
		}
		if err != nil {
			fmt.Fprintf(env.stderr, "dlq edit-replay: --body-file: %v\n", err)
			return ExitUsage
		}
		req["body_base64"] = base64.StdEncoding.EncodeToString(b)
	}
	if len(set) > 0 {
		req["set_headers"] = set
	}
	if len(remove) > 0 {
		req["remove_headers"] = []string(remove)
	}
	if len(req) == 0 {
		fmt.Fprintln(env.stderr, "dlq edit-replay: say what to change: --body, --body-file, --set-header or --remove-header")
		return ExitUsage
	}
	req["force"], req["dry_run"] = force, dryRun
	c := newAPIClient("edit-replay", af, env)
	res, code := answer[editResult](c, af.json, "POST", fmt.Sprintf("/api/v1/messages/%d/edit-replay", id), nil, req)
	if code >= 0 {
		return code
	}
	printEditResult(c, id, res)
	return ExitOK
}

// editResult is the answer of an edit-then-replay: the copy sent (or, in
// a dry run, that would be), its task, and the audited changes.
type editResult struct {
	DryRun bool `json:"dry_run"`
	Task   *struct {
		ID     int64  `json:"id"`
		Status string `json:"status"`
	} `json:"task"`
	Copy struct {
		ReplayID   string          `json:"replay_id"`
		Exchange   string          `json:"exchange"`
		RoutingKey string          `json:"routing_key"`
		Properties json.RawMessage `json:"properties"`
		Headers    json.RawMessage `json:"headers"`
		Body       []byte          `json:"body"`
	} `json:"copy"`
	Diff json.RawMessage `json:"diff"`
}

// printEditResult prints an edit-then-replay's answer: where the copy
// goes (or went), its headers and body, and the audited changes.
func printEditResult(c *apiClient, id int64, res editResult) {
	w := c.env.stdout
	if res.DryRun {
		fmt.Fprintf(w, "dry run: nothing was sent. The copy of message %d would go to exchange %q, routing key %q:\n", id, res.Copy.Exchange, res.Copy.RoutingKey)
	} else if res.Task != nil {
		fmt.Fprintf(w, "copy of message %d sent by replay task %d (%s); x-dlq-replay-id %s\n", id, res.Task.ID, res.Task.Status, res.Copy.ReplayID)
		fmt.Fprintf(w, "follow it with: dlq replays %d; find the copy if it dies again: dlq ls --q %s --status all\n", res.Task.ID, res.Copy.ReplayID)
	}
	fmt.Fprintln(w, "\nheaders:")
	c.printRaw(res.Copy.Headers)
	fmt.Fprintf(w, "\nbody (%d bytes):\n", len(res.Copy.Body))
	if isText(res.Copy.Body) {
		fmt.Fprintln(w, string(res.Copy.Body))
	} else {
		fmt.Fprintln(w, "(binary, base64) "+base64.StdEncoding.EncodeToString(res.Copy.Body))
	}
	fmt.Fprintln(w, "\nchanges (as audited):")
	c.printRaw(res.Diff)
}

func isText(b []byte) bool {
	for _, r := range string(b) {
		if r == '\uFFFD' {
			return false
		}
	}
	return true
}

// runPolicies lists the automatic replay policies with their state.
func runPolicies(args []string, env cliEnv) int {
	fs := flag.NewFlagSet("dlq policies", flag.ContinueOnError)
	var af apiFlags
	af.register(fs, env)
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: dlq policies [flags]   the automatic replay policies: selection, schedule, state")
		fs.PrintDefaults()
	}
	if code := parseNoArgs(fs, args, env); code >= 0 {
		return code
	}
	c := newAPIClient("policies", af, env)
	v, code := answer[cron.PoliciesView](c, af.json, "GET", "/api/v1/policies", nil, nil)
	if code >= 0 {
		return code
	}
	if len(v.Policies) == 0 {
		fmt.Fprintln(env.stdout, "no automatic replay policies (recovery.policies in the configuration)")
		return ExitOK
	}
	fmt.Fprintf(env.stdout, "job schedule: %s\n\n", v.Schedule)
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tSTATE\tQUEUES\tCATEGORIES\tDELAYS\tRATE\tIN BACKOFF\tLAST RUN")
	for _, p := range v.Policies {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, policyState(p), listOr(p.Queues, "any"),
			strings.Join(p.Categories, ","), strings.Join(p.Delays, ", "), rate(p.RatePerSecond), thousands(p.InBackoff), timeCell(p.LastRunAt))
	}
	tw.Flush()
	for _, p := range v.Policies {
		if p.Paused && p.PausedReason != nil {
			fmt.Fprintf(env.stdout, "\n%s paused %s by %s: %s", p.Name, timeCell(p.PausedAt), deref(p.PausedBy), *p.PausedReason)
		}
		if p.LastDryRun != nil {
			d := p.LastDryRun
			fmt.Fprintf(env.stdout, "\n%s (dry run) at %s would replay %s and park %s; first ids: %s", p.Name,
				timefmt.Human(d.At), thousands(d.Due), thousands(d.WouldPark), joinInts(d.Sample))
		}
	}
	fmt.Fprintln(env.stdout)
	return ExitOK
}

func policyState(p cron.PolicyView) string {
	switch {
	case p.Paused:
		return "paused"
	case p.DryRun:
		return "dry run"
	}
	return "active"
}

func listOr(l []string, none string) string {
	if len(l) == 0 {
		return none
	}
	return strings.Join(l, ",")
}

func rate(r float64) string {
	if r == 0 {
		return "unthrottled"
	}
	return strconv.FormatFloat(r, 'f', -1, 64) + "/s"
}

func deref(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}

// runPolicy pauses or resumes one policy.
func runPolicy(args []string, env cliEnv) int {
	usage := func() {
		fmt.Fprintln(env.stderr, "usage: dlq policy pause [--reason TEXT] NAME | dlq policy resume NAME   stop or restart an automatic replay policy (see dlq policies)")
	}
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		// Help before a subcommand lists the subcommands' flags too: the
		// flags are what someone asking for help is looking for.
		usage()
		fs, _, _ := policyFlags("pause", env)
		fmt.Fprintln(env.stderr, "\nflags of dlq policy pause (dlq policy resume takes the same but --reason):")
		fs.SetOutput(env.stderr)
		fs.PrintDefaults()
		return ExitOK
	}
	if len(args) == 0 || (args[0] != "pause" && args[0] != "resume") {
		if len(args) > 0 {
			fmt.Fprintf(env.stderr, "dlq policy: %q is neither pause nor resume\n", args[0])
		}
		usage()
		return ExitUsage
	}
	verb := args[0]
	fs, af, reason := policyFlags(verb, env)
	fs.Usage = func() { usage(); fs.PrintDefaults() }
	name, code := oneArg(fs, args[1:], env, "policy name")
	if code >= 0 {
		return code
	}
	c := newAPIClient("policy "+verb, *af, env)
	var q url.Values
	if *reason != "" {
		q = url.Values{"reason": {*reason}}
	}
	p, code := answer[cron.PolicyView](c, af.json, "POST", "/api/v1/policies/"+url.PathEscape(name)+"/"+verb, q, nil)
	if code >= 0 {
		return code
	}
	fmt.Fprintf(env.stdout, "policy %s is %s\n", p.Name, policyState(p))
	return ExitOK
}

// policyFlags are the flags of dlq policy verb (pause or resume): the API's,
// and pause's --reason.
func policyFlags(verb string, env cliEnv) (*flag.FlagSet, *apiFlags, *string) {
	fs := flag.NewFlagSet("dlq policy "+verb, flag.ContinueOnError)
	var (
		af     apiFlags
		reason string
	)
	af.register(fs, env)
	if verb == "pause" {
		fs.StringVar(&reason, "reason", "", "why (recorded, and shown in dlq policies and the alert)")
	}
	return fs, &af, &reason
}
