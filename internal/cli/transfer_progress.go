package cli

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progressEvery is how often a long export or import says how far it got.
const progressEvery = 5 * time.Second

// transferProgress prints how far a long export or import has come, a line every
// progressEvery, when stderr is a terminal: an operator watching 40,000
// messages go sees it move, while stderr read by a script or a test stays
// as it was (stdout, the export's or --json's, is never written to).
type transferProgress struct {
	w         io.Writer
	cmd, verb string // "export", "exported"
	every     time.Duration
	now       func() time.Time
	next      time.Time
}

// newTransferProgress is the progress of dlq cmd on stderr; nil (which prints
// nothing) when stderr is not a terminal.
func newTransferProgress(stderr io.Writer, cmd, verb string) *transferProgress {
	f, ok := stderr.(*os.File)
	if !ok {
		return nil
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	p := &transferProgress{w: stderr, cmd: cmd, verb: verb, every: progressEvery, now: time.Now}
	p.next = p.now().Add(p.every)
	return p
}

// tick reports n messages done, with more said after them, if the last
// report is progressEvery ago.
func (p *transferProgress) tick(n int64, more string) {
	if p == nil {
		return
	}
	now := p.now()
	if now.Before(p.next) {
		return
	}
	p.next = now.Add(p.every)
	fmt.Fprintf(p.w, "dlq %s: %s messages %s so far%s\n", p.cmd, thousands(n), p.verb, more)
}
