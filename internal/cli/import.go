package cli

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"

	"github.com/dlq/dlq/internal/exportline"
)

// lineError reads the line number of an import's refusal ("line 4: …").
var lineError = regexp.MustCompile(`^line (\d+): (.*)$`)

// importTotals are the messages an import stored and skipped so far.
type importTotals struct {
	Imported int64 `json:"imported"`
	Skipped  int64 `json:"skipped"`
}

func runImport(args []string, env cliEnv) int {
	return runImportCtx(context.Background(), args, env)
}

// runImportCtx sends export lines to the API, a request per --batch lines:
// each request is all or nothing, and lines imported before are skipped,
// so after a refused line, a failure or an interrupt (ctx done) the same
// command, run again, stores nothing twice. A file without an export's end
// line, a cut export, is imported as far as it goes and ends the command
// with exit 1, saying how to get the rest.
func runImportCtx(ctx context.Context, args []string, env cliEnv) int {
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
		if terminal(cmp.Or(env.stdin, os.Stdin)) {
			// Waiting for an export typed in looks like a hang.
			fmt.Fprintln(env.stderr, "dlq import: give the export FILE to import, or pipe it in (dlq import < FILE, "+
				"dlq export ... | dlq import); stdin is a terminal (dlq import - reads it all the same)")
			return ExitUsage
		}
		files = []string{"-"}
	}
	im := &importer{c: c, ctx: ctx, batch: batch, maxBytes: maxBytes, progress: newTransferProgress(env.stderr, "import", "imported")}
	result := ExitOK
	for _, name := range files {
		in, closeIn, err := openExport(name, env)
		if err != nil {
			fmt.Fprintf(env.stderr, "dlq import: %v\n", err)
			return ExitFailure
		}
		code, cut := im.file(name, in)
		closeIn()
		if code != ExitOK {
			return code
		}
		if cut {
			result = ExitFailure
		}
	}
	if af.json {
		b, _ := json.Marshal(im.total)
		c.printRaw(b)
		return result
	}
	fmt.Fprintf(env.stdout, "%s messages imported, %s skipped (stored before)\n", thousands(im.total.Imported), thousands(im.total.Skipped))
	return result
}

// terminal says whether f is a terminal: a character device other than
// the null device (stdin of a job run with </dev/null is not one).
func terminal(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(fi, null)
}

// openExport opens an export file ("-": stdin), gzip-compressed or not.
func openExport(name string, env cliEnv) (io.Reader, func(), error) {
	var (
		f     io.Reader = cmp.Or(env.stdin, os.Stdin)
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

// importer sends files' lines to the API, batch by batch, and counts.
type importer struct {
	c        *apiClient
	ctx      context.Context
	batch    int
	maxBytes int64
	progress *transferProgress
	total    importTotals
	body     bytes.Buffer
	lines    int // lines in body
	first    int // the file's line number of body's first line
	name     string
}

// file sends one input's lines, batch by batch, and skips a selection
// record in them: a file that is one (`dlq import exports/*`), or its two
// lines among the exports' in a stream (`cat exports/* | dlq import`). It
// reports each part of the input that is a cut export, returning cut:
// the input, when its last line that is not blank is not an end line, and
// the lines before a record, when theirs is not (the record is a file of
// its own, so they ended a file).
func (im *importer) file(name string, in io.Reader) (code int, cut bool) {
	r := bufio.NewReaderSize(in, 256<<10)
	im.name, im.first, im.lines = name, 1, 0
	im.body.Reset()
	var (
		buf, second []byte
		complete    bool // the last line that is not blank is an end line
		from        = 1  // the first line after the last record
		content     bool // a line that is not blank from there on
	)
	take := func(line []byte) int {
		if len(bytes.TrimSpace(line)) > 0 {
			complete, content = isEndLine(line), true
		}
		return im.add(line)
	}
	for {
		var err error
		buf, err = exportline.Read(r, buf[:0])
		if code := im.readFailed(err, im.first+im.lines); code != ExitOK {
			return code, false
		}
		if err == nil && !bytes.HasPrefix(buf, []byte("{")) && nextIs(r, selectionMarker) {
			n := im.first + im.lines
			second, err = exportline.Read(r, second[:0])
			if code := im.readFailed(err, n+1); code != ExitOK {
				return code, false
			}
			if export, ok := selectionRecord(buf, second); ok {
				if code := im.skipRecord(r, export, n); code != ExitOK {
					return code, false
				}
				if content && !complete {
					im.cutNote(fmt.Sprintf("%s:%s (the export before the selection record)", name, lineSpan(from, n-1)))
					cut = true
				}
				complete, from, content = true, n+2, false
				continue
			}
			if code := take(buf); code != ExitOK {
				return code, false
			}
			// The line after is taken as any other, below.
			buf, second = second, buf
		}
		if len(buf) > 0 || err == nil {
			if code := take(buf); code != ExitOK {
				return code, false
			}
		}
		if err != nil {
			if code := im.send(); code != ExitOK {
				return code, false
			}
			if !complete {
				im.cutNote(name)
				cut = true
			}
			return ExitOK, cut
		}
	}
}

// readFailed reports an error reading line n of the input other than its
// end, and returns the exit code it ends the command with (ExitOK: none).
func (im *importer) readFailed(err error, n int) int {
	switch {
	case err == nil || errors.Is(err, io.EOF):
		return ExitOK
	case errors.Is(err, exportline.ErrTooLong):
		fmt.Fprintf(im.c.env.stderr, "dlq import: %s:%d: %v\n", im.name, n, err)
		return ExitUsage
	default:
		fmt.Fprintf(im.c.env.stderr, "dlq import: read %s: %v\n", im.name, err)
		return ExitFailure
	}
}

// nextIs reports that what r holds next begins with prefix. A read error
// is left to the next read, which meets it again.
func nextIs(r *bufio.Reader, prefix string) bool {
	b, _ := r.Peek(len(prefix))
	return string(b) == prefix
}

// add puts line in the body, sending the body first when line would
// take it over --batch-bytes, and after when it holds --batch lines.
func (im *importer) add(line []byte) int {
	if im.lines > 0 && int64(im.body.Len()+len(line)) >= im.maxBytes {
		if code := im.send(); code != ExitOK {
			return code
		}
	}
	im.body.Write(line)
	im.body.WriteByte('\n')
	im.lines++
	if im.lines >= im.batch {
		return im.send()
	}
	return ExitOK
}

// skipRecord skips the selection record of the cut export named export,
// lines n and n+1 of the input, saying so. It sends them as blank lines,
// which the API passes over, so that the lines after keep their numbers
// in its refusals. The record is named by the input's name when it is the
// whole input (a file of its own), by its lines otherwise.
func (im *importer) skipRecord(r *bufio.Reader, export string, n int) int {
	where := fmt.Sprintf("%s:%d-%d", im.name, n, n+1)
	_, err := r.Peek(1)
	whole := n == 1 && errors.Is(err, io.EOF)
	if whole {
		where = im.name
	}
	fmt.Fprintf(im.c.env.stderr, "dlq import: skipping %s: not an export but the selection dlq export recorded "+
		"for the cut export %s, which dlq export --resume reads\n", where, export)
	if whole {
		return ExitOK // no line after it to keep the number of: nothing to send
	}
	if code := im.add(nil); code != ExitOK {
		return code
	}
	return im.add(nil)
}

// cutNote says that where, a file or a part of a stream, is a cut export
// (it has no end line), and how to get the messages it lacks.
func (im *importer) cutNote(where string) {
	fmt.Fprintf(im.c.env.stderr, "dlq import: %s has no end line (%s): it is a cut export, imported as far as it goes, "+
		"without the messages after its last line. Export them (dlq export with the same flags, or "+
		"dlq export --output FILE --resume to finish a cut --output file) and import that: what is stored already is skipped.\n",
		where, `{"export":{…,"complete":true}}`)
}

// lineSpan says lines a to b: "4-6", or "4" for one.
func lineSpan(a, b int) string {
	if a >= b {
		return strconv.Itoa(a)
	}
	return fmt.Sprintf("%d-%d", a, b)
}

// isEndLine reports an export's end line,
// {"export":{"count":N,"last_id":ID,"complete":true}}. A message line
// has no "export" member, so most lines are told apart without decoding.
func isEndLine(line []byte) bool {
	if len(line) > 4096 || !bytes.Contains(line, []byte(`"export"`)) {
		return false
	}
	var l struct {
		ID     int64 `json:"id"`
		Export *struct {
			Complete bool `json:"complete"`
		} `json:"export"`
	}
	return json.Unmarshal(line, &l) == nil && l.ID == 0 && l.Export != nil && l.Export.Complete
}

// send sends the lines in body as one request.
func (im *importer) send() int {
	if im.lines == 0 {
		return ExitOK
	}
	c := im.c
	resp, err := c.stream(im.ctx, "POST", "/api/v1/messages/import", bytes.NewReader(im.body.Bytes()),
		http.Header{"Content-Type": {"application/x-ndjson"}})
	if err != nil {
		return im.failed(err)
	}
	defer resp.Body.Close()
	var a struct{ Imported, Skipped int64 }
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return im.failed(fmt.Errorf("unexpected answer: %w", err))
	}
	im.total.Imported += a.Imported
	im.total.Skipped += a.Skipped
	im.first += im.lines
	im.lines = 0
	im.body.Reset()
	im.progress.tick(im.total.Imported, fmt.Sprintf(", %s skipped", thousands(im.total.Skipped)))
	return ExitOK
}

// failed ends the import at a request that failed, saying what was stored
// before it and that the same command goes on from there.
func (im *importer) failed(err error) int {
	env := im.c.env
	last := im.first + im.lines - 1
	var e *apiError
	if errors.As(err, &e) && e.status == http.StatusBadRequest {
		if m := lineError.FindStringSubmatch(e.message); m != nil {
			k, _ := strconv.Atoi(m[1])
			fmt.Fprintf(env.stderr, "dlq import: %s:%d: %s\n", im.name, im.first+k-1, m[2])
			fmt.Fprintf(env.stderr, "dlq import: nothing of lines %d-%d was stored; %s imported, %s skipped before them. "+
				"Fix the line and run the same command again: what was imported is skipped.\n",
				im.first, last, thousands(im.total.Imported), thousands(im.total.Skipped))
			return ExitUsage
		}
	}
	code := ExitFailure
	interrupted := im.ctx.Err() != nil
	if interrupted {
		fmt.Fprintln(env.stderr, "dlq import: interrupted")
	} else {
		code = im.c.fail(err)
	}
	if !interrupted && code != ExitUnavailable {
		// Refused (a token that may not import, a queue outside its
		// scope, ...): the same command would be refused again.
		if code == ExitDenied {
			fmt.Fprintln(env.stderr, "dlq import: importing needs an admin token of the target dlq (DLQ_TOKEN or --token)")
		}
		fmt.Fprintf(env.stderr, "dlq import: %s imported, %s skipped before line %d of %s; nothing from there on was stored.\n",
			thousands(im.total.Imported), thousands(im.total.Skipped), im.first, im.name)
		return code
	}
	// A request without an answer may have been stored or not, wholly.
	fmt.Fprintf(env.stderr, "dlq import: %s imported, %s skipped before line %d of %s; lines %d-%d were stored all or not at all. "+
		"Run the same command again to go on: what is stored already is skipped.\n",
		thousands(im.total.Imported), thousands(im.total.Skipped), im.first, im.name, im.first, last)
	return code
}
