package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/dlq/dlq/internal/exportline"
)

// exportTarget is where an export's lines go: stdout, or --output.
type exportTarget struct {
	w    io.Writer
	file *os.File // nil: stdout
	// path is --output; with tmp, file is a temporary file beside it that
	// keep renames over it.
	path string
	tmp  bool
	// before is how many messages the file held before (--resume).
	before int64
	// existed: --output was there before this export (not --resume).
	existed bool
	// selection is what the export selects (normalSelection), recorded
	// beside the file while it is cut.
	selection string
}

// recordSelection records the selection beside a cut export's file, and
// removes it beside a complete one (stdout: nothing).
func (t *exportTarget) recordSelection(cut bool) error {
	if t.file == nil {
		return nil
	}
	if cut {
		return writeSelection(t.path, t.selection)
	}
	return removeSelection(t.path)
}

// keep closes the file, moving a temporary one over --output.
func (t *exportTarget) keep() error {
	if t.file == nil {
		return nil
	}
	if err := t.file.Close(); err != nil {
		return fmt.Errorf("write %s: %w", t.file.Name(), err)
	}
	if !t.tmp {
		return nil
	}
	if err := os.Rename(t.file.Name(), t.path); err != nil {
		os.Remove(t.file.Name())
		return fmt.Errorf("replace %s with the new export: %w", t.path, err)
	}
	return nil
}

// discard closes the file, removing a temporary one: --output stays as it
// was.
func (t *exportTarget) discard() {
	if t.file == nil {
		return
	}
	t.file.Close()
	if t.tmp {
		os.Remove(t.file.Name())
	}
}

// untouched says, for a failure that discarded the new export, that an
// --output file there already was left as it was ("" for stdout).
func (t *exportTarget) untouched() string {
	if !t.tmp {
		return ""
	}
	return fmt.Sprintf(" %s is left as it was", t.path)
}

// inFile adds, after a resumed export's count, how many the file holds.
func (t *exportTarget) inFile(n int64) string {
	if t.before == 0 {
		return ""
	}
	return fmt.Sprintf(" (%s in the file)", thousands(t.before+n))
}

// openExportFile opens --output: a temporary file beside it, or, with
// resume, the file itself after its last complete line, returning the id
// to continue after (0: from the start). sel is what the command selects;
// a resume checks it against the selection recorded beside the file, or
// takes that one into sel.q when no filter flag was given
// (checkResumeSelection). A code of 0 or more ends the command with it.
func openExportFile(c *apiClient, output string, resume bool, sel *exportSelection) (*exportTarget, int64, int) {
	env := c.env
	given, measured := sel.given, sel.measured
	if resume {
		note := ""
		rp, err := prepareResume(output, func(int64) (err error) {
			note, err = checkResumeSelection(output, sel)
			return err
		})
		var rerr *resumeTimesError
		if errors.As(err, &rerr) {
			fmt.Fprintf(env.stderr, "dlq export: %v\n", rerr)
			return nil, 0, ExitUsage
		}
		if err != nil {
			return nil, 0, c.fail(err)
		}
		if rp.complete {
			fmt.Fprintf(env.stderr, "dlq export: %s is a complete export already\n", output)
			return nil, 0, ExitOK
		}
		if note != "" {
			fmt.Fprintf(env.stderr, "dlq export: %s\n", note)
		}
		f, err := os.OpenFile(output, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintf(env.stderr, "dlq export: %v\n", err)
			return nil, 0, ExitFailure
		}
		return &exportTarget{w: f, file: f, path: output, before: rp.messages}, rp.after, -1
	}
	if len(given) > 0 {
		// Said before the first line, so that it is on the terminal even
		// when the export is killed rather than cut.
		fmt.Fprintf(env.stderr, "dlq export: %s is %s; should this export be cut, --resume it with that (a duration would be measured again)\n",
			strings.Join(given, " "), strings.Join(measured, " "))
	}
	_, statErr := os.Stat(output)
	path, f, err := createBeside(output)
	if err != nil {
		fmt.Fprintf(env.stderr, "dlq export: %v\n", err)
		return nil, 0, ExitFailure
	}
	return &exportTarget{w: f, file: f, path: path, tmp: true, existed: statErr == nil}, 0, -1
}

// createBeside creates a temporary file in the directory of path (a
// rename within it is atomic), with the mode path has, or 0644 less the
// umask for a new one. It returns path with symbolic links resolved, which
// the rename replaces: renamed over the link, the export would land beside
// the file the link names.
func createBeside(path string) (string, *os.File, error) {
	mode := os.FileMode(0o644)
	fi, statErr := os.Stat(path)
	if statErr == nil {
		mode = fi.Mode().Perm()
		if real, err := filepath.EvalSymlinks(path); err == nil {
			path = real
		}
	}
	for i := 0; ; i++ {
		name := fmt.Sprintf("%s.%d-%d.tmp", path, os.Getpid(), i)
		f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
		if errors.Is(err, os.ErrExist) && i < 100 {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("create the export beside %s: %w", path, err)
		}
		if statErr == nil {
			// The umask narrowed the mode the file had.
			_ = f.Chmod(mode)
		}
		return path, f, nil
	}
}

// resumeExportFile prepares the export already in path to be continued:
// it cuts the file after its last complete line and returns that line's
// message id to continue after (0 when it holds none). complete reports
// an export that has its end line already, which is left as it is.
func resumeExportFile(path string) (after int64, complete bool, err error) {
	rp, err := prepareResume(path, nil)
	return rp.after, rp.complete, err
}

// resumePoint is where an export file is continued.
type resumePoint struct {
	after    int64 // the id to continue after (0: from the start)
	messages int64 // the message lines the file holds
	complete bool  // it has its end line already
}

// prepareResume is resumeExportFile, asking check first, when the file
// holds messages and is not complete, whether it may be continued: an
// error from check leaves the file as it is and is returned.
func prepareResume(path string, check func(after int64) error) (resumePoint, error) {
	t, err := exportTail(path)
	if err != nil || t.done {
		return resumePoint{complete: t.done}, err
	}
	if check != nil && t.last > 0 {
		if err := check(t.last); err != nil {
			return resumePoint{}, err
		}
	}
	if err := os.Truncate(path, t.size); err != nil && !errors.Is(err, os.ErrNotExist) {
		return resumePoint{}, err
	}
	return resumePoint{after: t.last, messages: t.messages}, nil
}

// exportEnd is what exportTail read of an export file.
type exportEnd struct {
	last     int64 // the id of its last complete message line
	messages int64 // its complete message lines
	done     bool  // it ends with the end line
	size     int64 // its size up to its last complete line
}

// exportTail reads an export file already written: the id of its last
// complete message line, how many there are, whether it ends with the end
// line, and the size up to its last complete line (a line cut short is
// dropped on resume). A missing file is an empty one.
func exportTail(path string) (exportEnd, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return exportEnd{}, nil
	}
	if err != nil {
		return exportEnd{}, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 256<<10)
	var (
		buf []byte
		e   exportEnd
	)
	for {
		buf, err = exportline.Read(r, buf[:0])
		if errors.Is(err, io.EOF) {
			// A last line without its newline was cut short.
			return e, nil
		}
		if err != nil {
			return exportEnd{}, fmt.Errorf("read %s: %w", path, err)
		}
		e.size += int64(len(buf)) + 1
		var l struct {
			ID     int64           `json:"id"`
			Export json.RawMessage `json:"export"`
		}
		if json.Unmarshal(buf, &l) != nil {
			return exportEnd{}, fmt.Errorf("%s is not an export: a line at byte %d is not JSON", path, e.size-int64(len(buf))-1)
		}
		if l.Export != nil && l.ID == 0 {
			e.done = true
		} else if l.ID > 0 {
			e.last = l.ID
			e.messages++
		}
	}
}
