package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlq/dlq/internal/secrets"
	"github.com/dlq/dlq/internal/tlsconf"
)

// The operator commands (every one but replay, replays and cancel, which
// use the control queue) talk to a running dlq's HTTP API: DLQ_URL (default
// http://127.0.0.1:8080) with the bearer token DLQ_TOKEN (or
// DLQ_ADMIN_TOKEN). They print readable tables, or the API's JSON with
// --json, and exit with a code that says what happened (see exit.go): 0
// done, 1 failed (409 and the like), 2 bad flags or a parameter the API
// refused (400, including a missing --yes), 3 dlq unreachable or failing
// (429, 5xx), 4 not found, 5 token refused (401, 403). cmd/dlq's
// TestCLIBinary holds the binary to them.

// DLQURLDefault is where the CLI finds the API without DLQ_URL.
const DLQURLDefault = "http://127.0.0.1:8080"

// cliEnv is what an operator command reads and writes; tests run commands
// in-process with their own.
type cliEnv struct {
	getenv         func(string) string
	stdout, stderr io.Writer
	// now, when set, is the clock a duration ago (--after 24h) is
	// measured from: a test runs a command "an hour later". nil: time.Now.
	now func() time.Time
	// stdin is what dlq import reads without a file; nil: os.Stdin.
	stdin *os.File
}

func osEnv() cliEnv { return cliEnv{getenv: os.Getenv, stdout: os.Stdout, stderr: os.Stderr} }

// clock is the time now, for measuring durations ago.
func (e cliEnv) clock() time.Time {
	if e.now == nil {
		return time.Now()
	}
	return e.now()
}

// apiFlags are the flags every API command takes.
type apiFlags struct {
	url     string
	token   string
	caFile  string
	json    bool
	timeout time.Duration
	// envToken is the token from the environment, used when --token is
	// not given. It is kept out of the flag's default, which -h prints:
	// a help text must not show a secret to whoever looks at the screen.
	envToken string
	// tokenErr is a token file that could not be read; reported when a
	// command runs, not while flags are registered.
	tokenErr error
}

func (f *apiFlags) register(fs *flag.FlagSet, env cliEnv) {
	f.envToken, f.tokenErr = envToken(env.getenv)
	fs.StringVar(&f.url, "url", cmp.Or(env.getenv("DLQ_URL"), DLQURLDefault), "dlq API base URL (env DLQ_URL)")
	fs.StringVar(&f.token, "token", "", "bearer token (env DLQ_TOKEN or DLQ_TOKEN_FILE, else DLQ_ADMIN_TOKEN or DLQ_ADMIN_TOKEN_FILE)")
	fs.StringVar(&f.caFile, "ca-file", env.getenv("DLQ_CA_FILE"), "PEM file of the CA that signed an https:// API's certificate (env DLQ_CA_FILE)")
	fs.BoolVar(&f.json, "json", false, "print the API's JSON answer instead of a table")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "how long to wait for the API")
}

// envToken is the operator's token from the environment: DLQ_TOKEN, else
// DLQ_ADMIN_TOKEN, each also from a file (_FILE, private to its owner).
func envToken(getenv func(string) string) (string, error) {
	for _, name := range []string{"DLQ_TOKEN", "DLQ_ADMIN_TOKEN"} {
		if v := getenv(name); v != "" {
			return v, nil
		}
		if path := getenv(name + "_FILE"); path != "" {
			v, err := secrets.ReadFile(path)
			if err != nil {
				return "", &usageError{fmt.Errorf("%s_FILE: %w (point %s_FILE at a readable token file, or set %s instead)", name, err, name, name)}
			}
			return strings.TrimSpace(v), nil
		}
	}
	return "", nil
}

// apiClient sends requests to the API and turns failures into exit codes.
type apiClient struct {
	name  string
	flags apiFlags
	env   cliEnv
	http  *http.Client
	// caErr is a --ca-file that could not be used; reported when a
	// request is made (exit 2), not by going on with the system's CAs.
	caErr error
	// urlErr is a DLQ_URL (--url) that is no base URL (baseURL); reported
	// when a request is made (exit 2).
	urlErr error
}

// newAPIClient is the client of a command whose every answer must come
// within --timeout.
func newAPIClient(name string, f apiFlags, env cliEnv) *apiClient {
	t, caErr := f.transport()
	var urlErr error
	f.url, urlErr = baseURL(f.url)
	return &apiClient{name: name, flags: f, env: env, http: &http.Client{Timeout: f.timeout, Transport: t}, caErr: caErr, urlErr: urlErr}
}

// newStreamClient is the client of a command whose answers take long to
// stream (export, import): only the wait for an answer to begin is
// bounded, by headerTimeout.
func newStreamClient(name string, f apiFlags, env cliEnv, headerTimeout time.Duration) *apiClient {
	t, caErr := f.transport()
	t.ResponseHeaderTimeout = headerTimeout
	var urlErr error
	f.url, urlErr = baseURL(f.url)
	return &apiClient{name: name, flags: f, env: env, http: &http.Client{Transport: t}, caErr: caErr, urlErr: urlErr}
}

// baseURL is DLQ_URL (--url) as the commands join paths to it: the API's
// own prefix /api/v1, which every path already has, is taken off an URL
// that ends with it (not doubled into /api/v1/api/v1/...). An URL without
// http:// or https:// is a usage error, named as such, not the URL
// parser's "first path segment in URL cannot contain colon".
func baseURL(raw string) (string, error) {
	u := strings.TrimRight(raw, "/")
	if u == "" {
		return raw, &usageError{errors.New("DLQ_URL (--url) is empty: give the dlq API's base URL, such as " + DLQURLDefault)}
	}
	lower := strings.ToLower(u)
	if !strings.HasPrefix(lower, "http://") && !strings.HasPrefix(lower, "https://") {
		return raw, &usageError{fmt.Errorf("DLQ_URL (--url) %q must start with http:// or https://, such as %s", raw, DLQURLDefault)}
	}
	return strings.TrimSuffix(u, "/api/v1"), nil
}

// transport is every API command's HTTP transport: the proxy from the
// environment and, with --ca-file (DLQ_CA_FILE), that CA. A CA file that
// cannot be used is an error of the command line: going on with the
// system's CAs would end in a certificate error that hides the cause.
// bearer is the token the command sends: --token, else the environment's.
func (f apiFlags) bearer() string { return cmp.Or(f.token, f.envToken) }

func (f apiFlags) transport() (*http.Transport, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if f.caFile == "" {
		return t, nil
	}
	tc, err := (tlsconf.Client{CAFile: f.caFile}).Config()
	if err != nil {
		return t, &usageError{fmt.Errorf("--ca-file (DLQ_CA_FILE) %q: %w (point it at the PEM file of the CA that signed the API's certificate)", f.caFile, err)}
	}
	t.TLSClientConfig = tc
	return t, nil
}

// usageError is a fault of the command line or of the configuration the
// command runs with, found when it runs (exit 2, ExitUsage).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// apiError is an answer other than 2xx.
type apiError struct {
	status  int
	code    string
	message string
	// reason is the error's reason (no_approver): a refusal that another
	// token would not change.
	reason string
}

func (e *apiError) Error() string {
	if e.code == "" {
		return fmt.Sprintf("HTTP %d", e.status)
	}
	// The code once, as the control queue's refusals print it (withoutCode):
	// "not_found (HTTP 404): not found: …" said it twice.
	msg := withoutCode(e.code, e.message)
	if msg == "" {
		return fmt.Sprintf("%s (HTTP %d)", e.code, e.status)
	}
	return fmt.Sprintf("%s (HTTP %d): %s", e.code, e.status, msg)
}

// newAPIError is a refusal with the status and, when the body is the API's
// error envelope, its code and message.
func newAPIError(status int, body []byte) *apiError {
	e := &apiError{status: status}
	var env struct {
		Error struct{ Code, Message, Reason string } `json:"error"`
	}
	if json.Unmarshal(body, &env) == nil {
		e.code, e.message, e.reason = env.Error.Code, env.Error.Message, env.Error.Reason
	}
	return e
}

// call sends one request and returns the body of a 2xx answer.
func (c *apiClient) call(ctx context.Context, method, path string, query url.Values, body any) ([]byte, error) {
	u := strings.TrimRight(c.flags.url, "/") + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := c.request(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach dlq at %s (is dlq serve running? set DLQ_URL): %w", c.flags.url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read the answer of %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, c.refusal(resp.StatusCode, strings.TrimRight(c.flags.url, "/")+path, b)
	}
	return b, nil
}

// refusal is the error of a non-2xx answer from u. An answer without the
// API's error envelope did not come from dlq's API: DLQ_URL points
// elsewhere (the console at /ui/, another service), a fault of the
// configuration (exit 2, not "not found"). A 5xx or 429 without it is a
// proxy's page for a dlq behind it that is down or busy: unavailable.
func (c *apiClient) refusal(status int, u string, body []byte) error {
	e := newAPIError(status, body)
	if e.code != "" || status >= 500 || status == http.StatusTooManyRequests {
		return e
	}
	return &usageError{fmt.Errorf("%s answered HTTP %d, not in dlq's API error format: DLQ_URL (or --url, now %q) must be "+
		"dlq's base URL, such as http://host:8080, without /ui/ or /api/v1", u, status, c.flags.url)}
}

// answer makes one call to the API and decodes its answer into T. With
// --json it prints the answer as it came instead. A code of 0 or more
// ends the command with it (printed, or failed); -1: go on with v.
func answer[T any](c *apiClient, asJSON bool, method, path string, query url.Values, body any) (v T, code int) {
	b, err := c.call(context.Background(), method, path, query, body)
	if err != nil {
		return v, c.fail(err)
	}
	if asJSON {
		c.printRaw(b)
		return v, ExitOK
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, c.fail(fmt.Errorf("unexpected answer: %w", err))
	}
	return v, -1
}

// request is a request to the API at u with the command's token: every
// API command's requests are made here.
func (c *apiClient) request(ctx context.Context, method, u string, body io.Reader) (*http.Request, error) {
	if c.flags.tokenErr != nil && c.flags.bearer() == "" {
		return nil, c.flags.tokenErr
	}
	if c.urlErr != nil {
		return nil, c.urlErr
	}
	if c.caErr != nil {
		return nil, c.caErr
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, &usageError{fmt.Errorf("bad DLQ_URL %q: %w", c.flags.url, err)}
	}
	if token := c.flags.bearer(); token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return req, nil
}

// fail prints err and returns the exit code that describes it.
func (c *apiClient) fail(err error) int {
	var e *apiError
	switch {
	case errors.As(err, &e) && e.status == http.StatusUnauthorized && c.flags.bearer() != "":
		// The API's message asks for a bearer token; this one sent one.
		tokenRefused(c.env.stderr, c.name, e.code)
	case errors.As(err, &e) && e.status == http.StatusBadRequest && filterCommands[c.name]:
		fmt.Fprintf(c.env.stderr, "dlq %s: %s\n", c.name, flagWords(err.Error()))
	default:
		fmt.Fprintf(c.env.stderr, "dlq %s: %v\n", c.name, err)
	}
	var ue *usageError
	if errors.As(err, &ue) {
		return ExitUsage
	}
	if !errors.As(err, &e) {
		return ExitUnavailable
	}
	switch {
	case e.status == http.StatusUnauthorized:
		if c.flags.bearer() == "" {
			fmt.Fprintf(c.env.stderr, "dlq %s: set DLQ_TOKEN to a token of this dlq\n", c.name)
		}
		return ExitDenied
	case e.status == http.StatusForbidden && e.reason != "":
		// Refused for what was asked (no one may approve it), not for the
		// token: exit 5 would have a script replace a good token.
		return ExitFailure
	case e.status == http.StatusForbidden:
		return ExitDenied
	case e.status == http.StatusNotFound:
		return ExitNotFound
	case e.status == http.StatusBadRequest:
		return ExitUsage
	case e.status == http.StatusTooManyRequests, e.status >= 500:
		return ExitUnavailable
	}
	return ExitFailure
}

// tokenRefused says what to do when dlq refused the token the command
// sent (HTTP 401, or the control queue's invalid_token): the same words
// for both doors.
func tokenRefused(w io.Writer, name, code string) {
	fmt.Fprintf(w, "dlq %s: the token was refused (%s): check that DLQ_TOKEN or --token is a token of this dlq\n", name, code)
}

// printRaw prints an API answer as indented JSON.
func (c *apiClient) printRaw(b []byte) {
	var out bytes.Buffer
	if json.Indent(&out, b, "", "  ") != nil {
		out.Reset()
		out.Write(b)
	}
	fmt.Fprintln(c.env.stdout, strings.TrimRight(out.String(), "\n"))
}

// listing returns the table of a listing: on stdout, or with --json
// nowhere (each page is printed as the API answered it instead).
func (c *apiClient) listing() *tabwriter.Writer {
	w := c.env.stdout
	if c.flags.json {
		w = io.Discard
	}
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}

// pages prints a listing: its first page, or with all every page,
// following next_cursor. show decodes a page, writes its rows to table
// (from listing, its header written already) and returns its next cursor
// (nil on the last page). A failure prints nothing of the table.
func (c *apiClient) pages(ctx context.Context, path string, q url.Values, all bool, table *tabwriter.Writer, show func([]byte) (*string, error)) int {
	for {
		b, err := c.call(ctx, "GET", path, q, nil)
		if err != nil {
			return c.fail(err)
		}
		next, err := show(b)
		if err != nil {
			return c.fail(fmt.Errorf("unexpected answer: %w", err))
		}
		if c.flags.json {
			c.printRaw(b)
		}
		if next == nil {
			table.Flush()
			return ExitOK
		}
		if !all {
			table.Flush()
			if !c.flags.json {
				fmt.Fprintf(c.env.stderr, "more: dlq %s --cursor %s (same filters), or --all\n", c.name, *next)
			}
			return ExitOK
		}
		q.Set("cursor", *next)
	}
}

// shorten cuts s to n runes for a table cell.
func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
