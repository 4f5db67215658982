package cli

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dlq/dlq/config"
	"github.com/dlq/dlq/control"
)

// The replay commands talk to a running dlq through the control queue (an
// RPC with a direct reply-to), so they work wherever the broker is
// reachable; they need no database access. The token is --token, else
// DLQ_TOKEN, else DLQ_ADMIN_TOKEN (or either's _FILE), else the
// configuration's admin token.

type rpcFlags struct {
	json    bool
	timeout time.Duration
	// token is --token. Its default is empty, never the environment's, so
	// that -h does not print a token (as apiFlags.token).
	token string
}

// rpcTokenHelp is the help of the replay commands' token, for their usage.
const rpcTokenHelp = "The token is --token, else DLQ_TOKEN (or DLQ_TOKEN_FILE), else DLQ_ADMIN_TOKEN (or DLQ_ADMIN_TOKEN_FILE), else the configuration's admin token."

func (f *rpcFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.token, "token", "", "control queue token (env DLQ_TOKEN or DLQ_TOKEN_FILE, else DLQ_ADMIN_TOKEN or DLQ_ADMIN_TOKEN_FILE)")
	fs.BoolVar(&f.json, "json", false, "print the answer as JSON on stdout")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "how long to wait for dlq's answer")
}

// rpc connects to the control queue named by the configuration.
func rpc(ctx context.Context, name string, cfg config.Config, rf rpcFlags) (*control.Client, int) {
	timeout := rf.timeout
	token, err := rpcToken(rf.token, os.Getenv, cfg.AdminToken)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlq %s: %v\n", name, err)
		return nil, ExitUsage
	}
	if token == "" {
		fmt.Fprintf(os.Stderr, "dlq %s: no token: give --token or set DLQ_TOKEN (or DLQ_ADMIN_TOKEN, or either's _FILE)\n", name)
		return nil, ExitDenied
	}
	tlsCfg, err := cfg.AMQPClientTLS()
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlq %s: %v\n", name, err)
		return nil, ExitUsage
	}
	dctx, cancel := context.WithTimeout(ctx, min(timeout, 10*time.Second))
	defer cancel()
	c, err := control.DialTLS(dctx, cfg.AMQPURL, cfg.ControlQueue, token, tlsCfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlq %s: %v\n", name, err)
		return nil, ExitUnavailable
	}
	return c, -1
}

// rpcToken is the token the replay commands send: flag (--token), else
// the environment's (envToken; a token file that cannot be read is an
// error only when it is needed), else the configuration's admin token.
func rpcToken(flag string, getenv func(string) string, configured string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	token, err := envToken(getenv)
	if err != nil {
		return "", err
	}
	return cmp.Or(token, configured), nil
}

// send runs one command and returns its result, or prints the failure and
// returns the exit code.
func send(ctx context.Context, name string, c *control.Client, cmd control.Command, timeout time.Duration) (json.RawMessage, int) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Chosen here, not in Call, so that an unanswered command can be named.
	cmd.CommandID = cmp.Or(cmd.CommandID, rand.Text())
	a, err := c.Call(cctx, cmd)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlq %s: %v\n", name, err)
		if errors.Is(err, control.ErrNoAnswer) {
			again := ""
			if cmd.Command == control.CmdReplay {
				again = fmt.Sprintf(" Run it again with --command-id %s: that shows its answer and never makes a second task.", cmd.CommandID)
			}
			fmt.Fprintf(os.Stderr, "dlq %s: no dlq answered command %s on the control queue in %s; is dlq serve running? "+
				"If none took it, it expired unread and nothing was done; if one did, it may still be running.%s\n", name, cmd.CommandID, timeout, again)
		}
		return nil, ExitUnavailable
	}
	if !a.OK {
		return nil, refused(os.Stderr, name, a.Error)
	}
	return a.Result, -1
}

// refused prints why dlq refused a command (e, nil for an answer without
// its error) and returns the exit code. The code is printed once: the
// message often opens with it in words ("not found: …"). A refused token
// gets the HTTP commands' advice.
func refused(w io.Writer, name string, e *control.CommandError) int {
	if e == nil {
		e = &control.CommandError{Code: "unknown", Message: "no error in the answer"}
	}
	msg := withoutCode(e.Code, e.Message)
	switch {
	case e.Code == control.CodeInvalidToken && msg == "":
		tokenRefused(w, name, e.Code)
	case msg == "":
		fmt.Fprintf(w, "dlq %s: %s\n", name, e.Code)
	default:
		fmt.Fprintf(w, "dlq %s: %s: %s\n", name, e.Code, msg)
	}
	if e.Code == control.CodeConfirmRequired {
		fmt.Fprintf(w, "dlq %s: add --confirm to go ahead\n", name)
	}
	if e.Reason != "" {
		// Refused for what was asked, not for the token (as fail).
		return ExitFailure
	}
	return answerExit(e.Code)
}

// withoutCode is msg without the words that repeat code, at its start or
// its end ("not found: x" and "x: not found" for not_found are "x";
// "invalid token" for invalid_token is "").
func withoutCode(code, msg string) string {
	words := strings.ReplaceAll(code, "_", " ")
	if strings.EqualFold(msg, words) {
		return ""
	}
	if rest, ok := strings.CutPrefix(msg, words+": "); ok {
		return rest
	}
	if rest, ok := strings.CutSuffix(msg, ": "+words); ok {
		return rest
	}
	return msg
}

// answerExit maps an answer's error code to the exit code.
func answerExit(code string) int {
	switch code {
	case control.CodeMissingToken, control.CodeInvalidToken, control.CodeForbidden:
		return ExitDenied
	case control.CodeNotFound:
		return ExitNotFound
	case control.CodeInvalidJSON, control.CodeInvalidRequest, control.CodeUnknownCommand, control.CodeTooLarge, control.CodeConfirmRequired:
		return ExitUsage
	case control.CodeUnavailable, control.CodeRateLimited, control.CodeInternal:
		// As the HTTP API's 503, 429 and 500: retry later (the same
		// command_id is safe).
		return ExitUnavailable
	}
	return ExitFailure
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// printOrDecode ends a command's answer one of two ways: with --json it
// prints the answer as it came and returns ExitOK; else it decodes it into
// T for the caller to print, or prints why it could not and returns
// ExitFailure. A code of -1 means the caller goes on with the T.
func printOrDecode[T any](name string, res json.RawMessage, asJSON bool) (T, int) {
	var v T
	if asJSON {
		printJSON(res)
		return v, ExitOK
	}
	if err := json.Unmarshal(res, &v); err != nil {
		fmt.Fprintf(os.Stderr, "dlq %s: decode answer: %v\n", name, err)
		return v, ExitFailure
	}
	return v, -1
}

func printJSON(raw json.RawMessage) {
	var v any
	if json.Unmarshal(raw, &v) == nil {
		if b, err := json.MarshalIndent(v, "", "  "); err == nil {
			raw = b
		}
	}
	fmt.Println(string(raw))
}
