package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dlq/dlq/internal/exportline"
)

// Export runs `dlq export`: every message a filter selects, as JSON Lines.
// Ctrl-C (or SIGTERM) ends it as a cut export, which --resume continues.
func Export(args []string) int {
	ctx, stop := interruptContext()
	defer stop()
	return runExportCtx(ctx, args, osEnv())
}

// Import runs `dlq import`: an export's lines into this dlq. Ctrl-C (or
// SIGTERM) ends it saying what was stored and how to go on.
func Import(args []string) int {
	ctx, stop := interruptContext()
	defer stop()
	return runImportCtx(ctx, args, osEnv())
}

// interruptContext is done at the first Ctrl-C or SIGTERM, so that the
// command ends saying where it got to; a second one ends it at once, as
// the signal's default does.
func interruptContext() (context.Context, context.CancelFunc) {
	ctx, stop := signalContext()
	context.AfterFunc(ctx, stop)
	return ctx, stop
}

// transferTimeout is how long export and import wait for an answer to
// begin, unless --timeout says otherwise: an import answers once its
// whole request is stored.
const transferTimeout = 10 * time.Minute

// timeoutFlag returns --timeout if it was given, else def.
func timeoutFlag(fs *flag.FlagSet, given time.Duration, def time.Duration) time.Duration {
	if flagGiven(fs, "timeout") {
		return given
	}
	return def
}

// runExport writes an export to stdout or --output. An export that ends
// without its end line was cut: the command says so, with how to get the
// rest, and exits 3.
//
// A time flag given as a duration ago (--after 24h) is measured once, when
// the command starts. Continuing a cut export must select what the cut one
// did, so its bounds must be those same times: measured again, an hour
// later, "24h ago" leaves out the messages of the window's first hour, and
// a resume (a message id, not bound to the filter) would skip them without
// a word. So the command prints the times it measured, and --resume of a
// file that holds messages refuses a duration ago, asking for the time.
func runExport(args []string, env cliEnv) int {
	return runExportCtx(context.Background(), args, env)
}

// runExportCtx is runExport, ended as a cut export when ctx is done.
//
// --output is written to a temporary file beside it, which replaces it
// once the export ended or was cut after messages came (a cut file is what
// --resume continues): a refusal, an unreachable dlq or a cut before the
// first message leaves the file as it was. --resume appends to the file.
func runExportCtx(ctx context.Context, args []string, env cliEnv) int {
	fs := flag.NewFlagSet("dlq export", flag.ContinueOnError)
	var (
		af             apiFlags
		ff             filterFlags
		output, cursor string
		resume         bool
	)
	af.register(fs, env)
	ff.register(fs)
	fs.StringVar(&output, "output", "", "write to this file instead of stdout")
	fs.StringVar(&cursor, "cursor", "", "continue after this message id (the last one received)")
	fs.BoolVar(&resume, "resume", false, "with --output: continue the export already in the file after its last complete line, "+
		"with the filter flags it began with (--after/--before as the times it measured, not durations ago) "+
		"or none: the selection recorded beside the file (FILE.selection)")
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: dlq export [flags]   every message the filter flags select, newest first, as JSON Lines")
		fmt.Fprintln(env.stderr, "  dlq export --queue orders --field customer.tier=gold --output gold.ndjson")
		fmt.Fprintln(env.stderr, "  dlq export --queue orders --output gold.ndjson --resume   (after an interrupted export)")
		fs.PrintDefaults()
	}
	if code := parseNoArgs(fs, args, env); code >= 0 {
		return code
	}
	if resume && (output == "" || cursor != "") {
		fmt.Fprintln(env.stderr, "dlq export: --resume needs --output, and finds the cursor itself")
		return ExitUsage
	}
	q, err := ff.query(env.clock())
	if err != nil {
		fmt.Fprintf(env.stderr, "dlq export: %v\n", err)
		return ExitUsage
	}
	sel := exportSelection{q: q, flags: !ff.empty()}
	sel.given, sel.measured = relativeTimes(&ff, q)
	c := newStreamClient("export", af, env, timeoutFlag(fs, af.timeout, transferTimeout))

	target := &exportTarget{w: env.stdout}
	if output != "" {
		t, after, code := openExportFile(c, output, resume, &sel)
		if code >= 0 {
			return code
		}
		target = t
		if after > 0 {
			cursor = strconv.FormatInt(after, 10)
		}
		// A resume without filter flags takes the recorded selection.
		q = sel.q
		target.selection = normalSelection(q)
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}

	resp, err := c.stream(ctx, "GET", "/api/v1/messages/export?"+q.Encode(), nil, nil)
	if err != nil {
		target.discard()
		if ctx.Err() != nil {
			fmt.Fprintln(env.stderr, "dlq export: interrupted before the export began;"+target.untouched())
			return ExitFailure
		}
		code := c.fail(err)
		if s := target.untouched(); s != "" {
			fmt.Fprintln(env.stderr, "dlq export:"+s)
		}
		return code
	}
	defer resp.Body.Close()
	return finishExport(ctx, env, target, resp.Body, output != "", sel.given, sel.measured)
}

// finishExport copies the export's stream to target and ends the command:
// the file kept or left as it was, and what came, or how to get the rest.
func finishExport(ctx context.Context, env cliEnv, target *exportTarget, body io.Reader, toFile bool, given, measured []string) int {
	n, last, done, err := copyExport(target.w, body, newTransferProgress(env.stderr, "export", "exported"))
	var werr *exportWriteError
	if errors.As(err, &werr) {
		target.discard()
		fmt.Fprintf(env.stderr, "dlq export: %v\n", werr.err)
		if s := target.untouched(); s != "" {
			fmt.Fprintln(env.stderr, "dlq export:"+s)
		}
		return ExitFailure
	}
	if !done && n == 0 && target.tmp {
		target.discard()
		fmt.Fprintf(env.stderr, "dlq export: the export was cut before its first message: %v\n"+
			"dlq export:%s; run the same command again\n", cutCause(ctx, err), target.untouched())
		return ExitUnavailable
	}
	// A cut export over a file that was there keeps the file: the old
	// export may be the only complete one. The part goes beside it, where
	// --resume can finish it.
	partial := !done && target.tmp && target.existed
	if partial {
		target.path += ".partial"
	}
	if err := target.keep(); err != nil {
		fmt.Fprintf(env.stderr, "dlq export: %v\n", err)
		return ExitFailure
	}
	if err := target.recordSelection(!done); err != nil {
		// The export is kept all the same: a resume with the same filter
		// flags continues it, unchecked.
		fmt.Fprintf(env.stderr, "dlq export: %v\n", err)
	}
	if !done {
		how := fmt.Sprintf("--cursor %d", last)
		if toFile {
			how = "--resume"
		}
		if partial {
			how = fmt.Sprintf("--resume --output %s (%s is left as it was; move the finished export over it)",
				target.path, strings.TrimSuffix(target.path, ".partial"))
		}
		if len(given) > 0 {
			how += fmt.Sprintf(" and %s (the times this export measured; %s would be measured again)",
				strings.Join(measured, " "), strings.Join(given, " "))
		}
		fmt.Fprintf(env.stderr, "dlq export: the export was cut after %s messages%s (last id %d): %v\n"+
			"dlq export: run the same command with %s for the rest\n", thousands(n), target.inFile(n), last, cutCause(ctx, err), how)
		return ExitUnavailable
	}
	fmt.Fprintf(env.stderr, "exported %s messages%s\n", thousands(n), target.inFile(n))
	return ExitOK
}

// cutCause says what cut an export: the interrupt, or the stream's error.
func cutCause(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errors.New("interrupted")
	}
	return cmpErr(err)
}

// exportWriteError is a failure to write the export out, not to read it.
type exportWriteError struct{ err error }

func (e *exportWriteError) Error() string { return e.err.Error() }

// copyExport copies an export's JSON Lines from r to out, each complete
// line as it came. It counts the messages and keeps the last one's id,
// and reports done when the end line (an export object with no id) came:
// without it the export was cut, and err says by what (nil when the
// stream just ended, or at a line that is not an export's). p, when not
// nil, is told the count as it grows.
func copyExport(out io.Writer, r io.Reader, p *transferProgress) (n, last int64, done bool, err error) {
	w := bufio.NewWriterSize(out, 256<<10)
	br := bufio.NewReaderSize(r, 256<<10)
	var buf []byte
	for !done {
		buf, err = exportline.Read(br, buf[:0])
		if len(buf) > 0 && (err == nil || errors.Is(err, io.EOF) && json.Valid(buf)) {
			var l struct {
				ID     int64           `json:"id"`
				Export json.RawMessage `json:"export"`
			}
			if json.Unmarshal(buf, &l) != nil {
				break
			}
			if _, werr := w.Write(append(buf, '\n')); werr != nil {
				return n, last, false, &exportWriteError{werr}
			}
			if l.Export != nil && l.ID == 0 {
				done = true
			} else {
				n++
				last = l.ID
				p.tick(n, "")
			}
		}
		if err != nil {
			break
		}
	}
	if ferr := w.Flush(); ferr != nil {
		return n, last, false, &exportWriteError{ferr}
	}
	return n, last, done, err
}

func cmpErr(err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return errors.New("the stream ended without its end line")
	}
	return err
}

// stream sends a request and returns the response of a 2xx answer, its
// body unread.
func (c *apiClient) stream(ctx context.Context, method, path string, body io.Reader, header http.Header) (*http.Response, error) {
	req, err := c.request(ctx, method, strings.TrimRight(c.flags.url, "/")+path, body)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach dlq at %s (is dlq serve running? set DLQ_URL): %w", c.flags.url, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, c.refusal(resp.StatusCode, strings.TrimRight(c.flags.url, "/")+path, b)
	}
	return resp, nil
}
