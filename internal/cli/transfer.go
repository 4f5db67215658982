package cli

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/dlq/dlq/internal/exportline"
)

// Export runs `dlq export`: every message a filter selects, as JSON Lines.
func Export(args []string) int { return runExport(args, osEnv()) }

// Import runs `dlq import`: an export's lines into this dlq.
func Import(args []string) int { return runImport(args, osEnv()) }

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
	fs.BoolVar(&resume, "resume", false, "with --output: continue the export already in the file after its last complete line "+
		"(with --after/--before as the times the export began with, not durations ago)")
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
	given, measured := relativeTimes(&ff, q)
	c := newStreamClient("export", af, env, timeoutFlag(fs, af.timeout, transferTimeout))

	out := env.stdout
	if output != "" {
		f, after, code := openExportFile(c, output, resume, given, measured)
		if code >= 0 {
			return code
		}
		defer f.Close()
		out = f
		if after > 0 {
			cursor = strconv.FormatInt(after, 10)
		}
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}

	resp, err := c.stream(context.Background(), "GET", "/api/v1/messages/export?"+q.Encode(), nil, nil)
	if err != nil {
		return c.fail(err)
	}
	defer resp.Body.Close()
	n, last, done, err := copyExport(out, resp.Body)
	var werr *exportWriteError
	if errors.As(err, &werr) {
		fmt.Fprintf(env.stderr, "dlq export: %v\n", werr.err)
		return ExitFailure
	}
	if !done {
		how := fmt.Sprintf("--cursor %d", last)
		if output != "" {
			how = "--resume"
		}
		if len(given) > 0 {
			how += fmt.Sprintf(" and %s (the times this export measured; %s would be measured again)",
				strings.Join(measured, " "), strings.Join(given, " "))
		}
		fmt.Fprintf(env.stderr, "dlq export: the export was cut after %d messages (last id %d): %v\n"+
			"dlq export: run the same command with %s for the rest\n", n, last, cmpErr(err), how)
		return ExitUnavailable
	}
	fmt.Fprintf(env.stderr, "exported %s messages\n", thousands(n))
	return ExitOK
}

// openExportFile opens --output: anew, or, with resume, after its last
// complete line, returning the id to continue after (0: from the start).
// given and measured are the time flags given as durations ago and the
// times they were measured as (relativeTimes). A code of 0 or more ends
// the command with it.
func openExportFile(c *apiClient, output string, resume bool, given, measured []string) (*os.File, int64, int) {
	env := c.env
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	var after int64
	if resume {
		var complete bool
		var err error
		after, complete, err = prepareResume(output, func(int64) error {
			if len(given) == 0 {
				return nil
			}
			return &resumeTimesError{path: output, given: given}
		})
		var rerr *resumeTimesError
		if errors.As(err, &rerr) {
			fmt.Fprintf(env.stderr, "dlq export: %v\n", rerr)
			return nil, 0, ExitUsage
		}
		if err != nil {
			return nil, 0, c.fail(err)
		}
		if complete {
			fmt.Fprintf(env.stderr, "dlq export: %s is a complete export already\n", output)
			return nil, 0, ExitOK
		}
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	} else if len(given) > 0 {
		// Said before the first line, so that it is on the terminal even
		// when the export is killed rather than cut.
		fmt.Fprintf(env.stderr, "dlq export: %s is %s; should this export be cut, --resume it with that (a duration would be measured again)\n",
			strings.Join(given, " "), strings.Join(measured, " "))
	}
	f, err := os.OpenFile(output, flags, 0o644)
	if err != nil {
		fmt.Fprintf(env.stderr, "dlq export: %v\n", err)
		return nil, 0, ExitFailure
	}
	return f, after, -1
}

// relativeTimes lists the time flags given as a duration ago, as given
// ("--after 24h") and as measured (q's time: "--after 2026-05-01T10:00:00Z").
func relativeTimes(ff *filterFlags, q url.Values) (given, measured []string) {
	for _, tf := range []struct {
		flag  timeFlag
		param string
	}{{ff.after, "failed_after"}, {ff.before, "failed_before"}} {
		if _, err := time.ParseDuration(tf.flag.text); err != nil {
			continue
		}
		given = append(given, "--"+tf.flag.name+" "+tf.flag.text)
		measured = append(measured, "--"+tf.flag.name+" "+q.Get(tf.param))
	}
	return given, measured
}

// resumeTimesError refuses to resume an export with a time given as a
// duration ago.
type resumeTimesError struct {
	path  string
	given []string
}

func (e *resumeTimesError) Error() string {
	example := make([]string, len(e.given))
	for i, g := range e.given {
		name, _, _ := strings.Cut(g, " ")
		example[i] = name + " 2026-05-01T10:00:00Z"
	}
	return fmt.Sprintf("--resume: %s would be measured from now, not from when the export in %s began, "+
		"and the messages that failed in between would be skipped; give the time the export measured "+
		"as an RFC 3339 time (dlq export printed it: %s, say), or export again without --resume",
		strings.Join(e.given, " "), e.path, strings.Join(example, " "))
}

// resumeExportFile prepares the export already in path to be continued:
// it cuts the file after its last complete line and returns that line's
// message id to continue after (0 when it holds none). complete reports
// an export that has its end line already, which is left as it is.
func resumeExportFile(path string) (after int64, complete bool, err error) {
	return prepareResume(path, nil)
}

// prepareResume is resumeExportFile, asking check first, when the file
// holds messages and is not complete, whether it may be continued: an
// error from check leaves the file as it is and is returned.
func prepareResume(path string, check func(after int64) error) (after int64, complete bool, err error) {
	last, done, size, err := exportTail(path)
	if err != nil || done {
		return 0, done, err
	}
	if check != nil && last > 0 {
		if err := check(last); err != nil {
			return 0, false, err
		}
	}
	if err := os.Truncate(path, size); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, false, err
	}
	return last, false, nil
}

// exportWriteError is a failure to write the export out, not to read it.
type exportWriteError struct{ err error }

func (e *exportWriteError) Error() string { return e.err.Error() }

// copyExport copies an export's JSON Lines from r to out, each complete
// line as it came. It counts the messages and keeps the last one's id,
// and reports done when the end line (an export object with no id) came:
// without it the export was cut, and err says by what (nil when the
// stream just ended, or at a line that is not an export's).
func copyExport(out io.Writer, r io.Reader) (n, last int64, done bool, err error) {
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

// exportTail reads an export file already written: the id of its last
// complete message line, whether it ends with the end line, and the size
// up to its last complete line (a line cut short is dropped on resume). A
// missing file is an empty one.
func exportTail(path string) (last int64, done bool, size int64, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, 0, nil
	}
	if err != nil {
		return 0, false, 0, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 256<<10)
	var (
		buf []byte
		pos int64
	)
	for {
		buf, err = exportline.Read(r, buf[:0])
		if errors.Is(err, io.EOF) {
			// A last line without its newline was cut short.
			return last, done, pos, nil
		}
		if err != nil {
			return 0, false, 0, fmt.Errorf("read %s: %w", path, err)
		}
		pos += int64(len(buf)) + 1
		var l struct {
			ID     int64           `json:"id"`
			Export json.RawMessage `json:"export"`
		}
		if json.Unmarshal(buf, &l) != nil {
			return 0, false, 0, fmt.Errorf("%s is not an export: a line at byte %d is not JSON", path, pos-int64(len(buf))-1)
		}
		if l.Export != nil && l.ID == 0 {
			done = true
		} else if l.ID > 0 {
			last = l.ID
		}
	}
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
		return nil, newAPIError(resp.StatusCode, b)
	}
	return resp, nil
}

// lineError reads the line number of an import's refusal ("line 4: …").
var lineError = regexp.MustCompile(`^line (\d+): (.*)$`)

// runImport sends export lines to the API, a request per --batch lines:
// each request is all or nothing, and lines imported before are skipped,
// so after a refused line the same command, run again once the line is
// fixed, stores nothing twice.
func runImport(args []string, env cliEnv) int {
	fs := flag.NewFlagSet("dlq import", flag.ContinueOnError)
	var (
		af       apiFlags
		batch    int
		maxBytes int64
	)
	af.register(fs, env)
	fs.IntVar(&batch, "batch", 10_000, "lines per request (each request is stored all or nothing)")
	fs.Int64Var(&maxBytes, "batch-bytes", 256<<20, "bytes per request, at most")
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: dlq import [flags] [FILE ...]   store the messages of exports (FILE or stdin; .gz too) as pending")
		fs.PrintDefaults()
	}
	files, code := parseArgs(fs, args, env)
	if code >= 0 {
		return code
	}
	if batch < 1 || maxBytes < 1 {
		fmt.Fprintln(env.stderr, "dlq import: --batch and --batch-bytes must be at least 1")
		return ExitUsage
	}
	c := newStreamClient("import", af, env, timeoutFlag(fs, af.timeout, transferTimeout))
	if len(files) == 0 {
		files = []string{"-"}
	}
	var total struct {
		Imported int64 `json:"imported"`
		Skipped  int64 `json:"skipped"`
	}
	for _, name := range files {
		in, closeIn, err := openExport(name, env)
		if err != nil {
			fmt.Fprintf(env.stderr, "dlq import: %v\n", err)
			return ExitFailure
		}
		code := c.importFile(name, in, batch, maxBytes, &total.Imported, &total.Skipped)
		closeIn()
		if code != ExitOK {
			return code
		}
	}
	if af.json {
		b, _ := json.Marshal(total)
		c.printRaw(b)
		return ExitOK
	}
	fmt.Fprintf(env.stdout, "%s messages imported, %s skipped (stored before)\n", thousands(total.Imported), thousands(total.Skipped))
	return ExitOK
}

// openExport opens an export file ("-": stdin), gzip-compressed or not.
func openExport(name string, env cliEnv) (io.Reader, func(), error) {
	var (
		f     io.Reader = os.Stdin
		close           = func() {}
	)
	if name != "-" {
		file, err := os.Open(name)
		if err != nil {
			return nil, nil, err
		}
		f, close = file, func() { file.Close() }
	}
	br := bufio.NewReaderSize(f, 256<<10)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			close()
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
		return zr, close, nil
	}
	return br, close, nil
}

// importFile sends one file's lines, batch by batch.
func (c *apiClient) importFile(name string, in io.Reader, batch int, maxBytes int64, imported, skipped *int64) int {
	r := bufio.NewReaderSize(in, 256<<10)
	var (
		body  bytes.Buffer
		lines int // lines in body
		first = 1 // the file's line number of body's first line
		buf   []byte
	)
	send := func() int {
		if lines == 0 {
			return ExitOK
		}
		resp, err := c.stream(context.Background(), "POST", "/api/v1/messages/import", bytes.NewReader(body.Bytes()),
			http.Header{"Content-Type": {"application/x-ndjson"}})
		if err != nil {
			var e *apiError
			if errors.As(err, &e) && e.status == http.StatusBadRequest {
				if m := lineError.FindStringSubmatch(e.message); m != nil {
					k, _ := strconv.Atoi(m[1])
					fmt.Fprintf(c.env.stderr, "dlq import: %s:%d: %s\n", name, first+k-1, m[2])
					fmt.Fprintf(c.env.stderr, "dlq import: nothing of lines %d-%d was stored; %s imported, %s skipped before them. "+
						"Fix the line and run the same command again: what was imported is skipped.\n",
						first, first+lines-1, thousands(*imported), thousands(*skipped))
					return ExitUsage
				}
			}
			return c.fail(err)
		}
		defer resp.Body.Close()
		var a struct{ Imported, Skipped int64 }
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			return c.fail(fmt.Errorf("unexpected answer: %w", err))
		}
		*imported += a.Imported
		*skipped += a.Skipped
		first += lines
		lines = 0
		body.Reset()
		return ExitOK
	}
	for {
		var err error
		buf, err = exportline.Read(r, buf[:0])
		if errors.Is(err, exportline.ErrTooLong) {
			fmt.Fprintf(c.env.stderr, "dlq import: %s:%d: %v\n", name, first+lines, err)
			return ExitUsage
		}
		if err != nil && !errors.Is(err, io.EOF) {
			fmt.Fprintf(c.env.stderr, "dlq import: read %s: %v\n", name, err)
			return ExitFailure
		}
		if len(buf) > 0 || err == nil {
			if lines > 0 && int64(body.Len()+len(buf)) >= maxBytes {
				if code := send(); code != ExitOK {
					return code
				}
			}
			body.Write(buf)
			body.WriteByte('\n')
			lines++
			if lines >= batch {
				if code := send(); code != ExitOK {
					return code
				}
			}
		}
		if err != nil {
			return send()
		}
	}
}
