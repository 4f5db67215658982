package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/dlq/dlq/crypt"
	"github.com/dlq/dlq/store"
)

// RekeyJob names rekey's lease in job_leases and its runs in job_runs:
// one rekey at a time, fenced like the cron jobs (package cron).
const RekeyJob = "rekey"

// rekeyLeaseTTL is how long a rekey that stops renewing (killed) holds
// the job: the next one waits this long at most.
const rekeyLeaseTTL = 15 * time.Second

// Rekey runs `dlq rekey`: everything under an older key is re-encrypted
// under the first key of DLQ_ENCRYPTION_KEYS (its data key re-wrapped),
// and everything stored in plain text is sealed, online, in batches. Each
// batch commits on its own under the job's lease, so a rekey killed at
// any point loses nothing; run it again and it goes on from the rows'
// own state. --status prints what each key wraps and changes nothing, not
// even the schema.
func Rekey(args []string) int {
	var (
		status bool
		batch  int
	)
	cfg, log, _, code := LoadConfig("rekey", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&status, "status", false, "print what each key wraps (and the messages a missing key leaves unreadable), and change nothing")
		fs.IntVar(&batch, "batch", 500, "messages per transaction")
	})
	if code >= 0 {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if batch < 1 || batch > 10000 {
		fmt.Fprintln(os.Stderr, "dlq rekey: -batch must be from 1 to 10000")
		return ExitUsage
	}
	keys, err := cfg.EncryptionKeys()
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlq rekey: %v (rekey needs DLQ_ENCRYPTION_KEYS or DLQ_ENCRYPTION_KEYS_FILE)\n", err)
		return ExitUsage
	}
	ring, err := crypt.NewRing(keys)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlq rekey: %v\n", err)
		return ExitUsage
	}
	st, err := store.Open(ctx, store.Config{DatabaseURL: cfg.DatabaseURL, MaxConns: 4, Logger: log,
		Encryption: &store.Encryption{Ring: ring, SealHeader: cfg.SealHeader()}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlq rekey: %v\n", err)
		return ExitUsage
	}
	defer st.Close()
	if status {
		// Read only: not even the schema is migrated.
		if err := printKeyUsage(ctx, os.Stdout, st, ring); err != nil {
			fmt.Fprintf(os.Stderr, "dlq rekey: %v (--status changes nothing, the schema included: on a database dlq has not migrated yet, run dlq migrate first)\n", err)
			return ExitUnavailable
		}
		return ExitOK
	}
	if !cfg.NoMigrate {
		if _, err := st.Migrate(ctx, log); err != nil {
			fmt.Fprintf(os.Stderr, "dlq rekey: %v\n", err)
			return ExitUnavailable
		}
	}
	if err := rekey(ctx, st, ring, batch, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "dlq rekey: %v\n", err)
		return ExitFailure
	}
	return ExitOK
}

// rekey holds the job's lease and re-encrypts until nothing but rows it
// cannot read is left under another key.
func rekey(ctx context.Context, st *store.Store, ring *crypt.Ring, batch int, out io.Writer) error {
	host, _ := os.Hostname()
	holder := fmt.Sprintf("%s-%d rekey", host, os.Getpid())
	run, err := takeRekeyLease(ctx, st, holder, out)
	if err != nil {
		return err
	}
	lease := run.Lease
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go renewRekeyLease(rctx, cancel, st, lease)
	total, err := remaining(rctx, st, ring.Active())
	if err != nil {
		return finishRekey(st, run.RunID, 0, err)
	}
	fmt.Fprintf(out, "rekey: %d messages to re-encrypt under key %s (batches of %d)\n", total, ring.Active(), batch)
	p := &rekeyProgress{out: out, total: total, skipped: map[int64]error{}, start: time.Now()}
	if err := rekeyMessages(rctx, st, ring.Active(), lease, batch, p); err != nil {
		return finishRekey(st, run.RunID, p.done, err)
	}
	n, rest, err := st.RekeyRest(rctx, lease)
	if err != nil {
		return finishRekey(st, run.RunID, p.done, err)
	}
	p.show(true)
	if n > 0 {
		fmt.Fprintf(out, "rekey: %d failure groups, edits and index key re-encrypted\n", n)
	}
	p.printSkipped(rest)
	if err := finishRekey(st, run.RunID, p.done, nil); err != nil {
		return err
	}
	return printKeyUsage(ctx, out, st, ring)
}

// renewRekeyLease renews the job's lease until ctx ends, and cancels ctx
// with store.ErrLeaseLost when another holder has it.
func renewRekeyLease(ctx context.Context, cancel context.CancelCauseFunc, st *store.Store, lease store.Lease) {
	t := time.NewTicker(rekeyLeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := st.RenewLease(ctx, lease, rekeyLeaseTTL); errors.Is(err, store.ErrLeaseLost) {
				cancel(err)
				return
			}
		}
	}
}

// rekeyMessages re-encrypts the messages in batches, in passes from the
// lowest id: rows another transaction held (SKIP LOCKED) are found by the
// next pass. It stops when only rows it cannot read are left, when a pass
// changed nothing, or after 20 passes. An error from a batch is ctx's
// cause when ctx ended (the lease lost).
func rekeyMessages(ctx context.Context, st *store.Store, active string, lease store.Lease, batch int, p *rekeyProgress) error {
	for pass := 1; ; pass++ {
		var after int64
		changed := 0
		for {
			res, err := st.RekeyMessages(ctx, lease, after, batch)
			if err != nil {
				if cause := context.Cause(ctx); cause != nil {
					err = cause
				}
				return err
			}
			n := res.Rewrapped + res.Sealed
			p.done += int64(n)
			changed += n
			for _, s := range res.Skipped {
				p.skipped[s.ID] = s.Err
			}
			after = res.Last
			p.show(false)
			if res.Done {
				break
			}
		}
		left, err := remaining(ctx, st, active)
		if err != nil {
			return err
		}
		if left <= int64(len(p.skipped)) || changed == 0 || pass >= 20 {
			return nil
		}
	}
}

// rekeyProgress is what a rekey has done so far, shown on out.
type rekeyProgress struct {
	out         io.Writer
	total, done int64
	// skipped are the messages left as they are, and why.
	skipped  map[int64]error
	start    time.Time
	lastShow time.Time
}

// show prints the progress, at most once a second unless forced.
func (p *rekeyProgress) show(force bool) {
	if !force && time.Since(p.lastShow) < time.Second {
		return
	}
	p.lastShow = time.Now()
	rate := float64(p.done) / max(time.Since(p.start).Seconds(), 0.001)
	eta := "-"
	if rate > 0 && p.total > p.done {
		eta = (time.Duration(float64(p.total-p.done)/rate) * time.Second).String()
	}
	pct := 100.0
	if p.total > 0 {
		pct = 100 * float64(p.done) / float64(p.total)
	}
	fmt.Fprintf(p.out, "rekey: %d/%d messages (%.1f%%), %.0f/s, eta %s, %d unreadable\n", p.done, p.total, pct, rate, eta, len(p.skipped))
}

// printSkipped prints the first 20 messages left as they are, in id
// order, and then rest: what RekeyRest left.
func (p *rekeyProgress) printSkipped(rest []store.RekeySkip) {
	ids := make([]int64, 0, len(p.skipped))
	for id := range p.skipped {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for i, id := range ids {
		if i == 20 {
			fmt.Fprintf(p.out, "rekey: ... and %d more\n", len(ids)-20)
			break
		}
		fmt.Fprintf(p.out, "rekey: message %d left as it is: %v\n", id, p.skipped[id])
	}
	for _, s := range rest {
		fmt.Fprintf(p.out, "rekey: %s %d left as it is: %v\n", s.Table, s.ID, s.Err)
	}
}

// takeRekeyLease takes the job, waiting while another rekey holds it (a
// killed one's lease runs out after rekeyLeaseTTL).
func takeRekeyLease(ctx context.Context, st *store.Store, holder string, out io.Writer) (store.JobRunStart, error) {
	said := false
	for {
		run, ok, err := st.BeginJobRun(ctx, RekeyJob, holder, time.Now().UTC().Truncate(time.Millisecond), rekeyLeaseTTL)
		if err != nil {
			return store.JobRunStart{}, err
		}
		if ok {
			return run, nil
		}
		if !said {
			fmt.Fprintf(out, "rekey: another rekey holds the job; waiting for it (a stopped one's lease runs out within %s)\n", rekeyLeaseTTL)
			said = true
		}
		select {
		case <-ctx.Done():
			return store.JobRunStart{}, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func finishRekey(st *store.Store, runID, rows int64, runErr error) error {
	outcome := store.JobSuccess
	switch {
	case errors.Is(runErr, store.ErrLeaseLost):
		outcome = store.JobLeaseLost
	case runErr != nil:
		outcome = store.JobFailure
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.FinishJobRun(ctx, runID, outcome, rows, runErr); err != nil && runErr == nil {
		return err
	}
	return runErr
}

// remaining counts the messages not under the active key.
func remaining(ctx context.Context, st *store.Store, active string) (int64, error) {
	uses, err := st.KeyUsage(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, u := range uses {
		if u.KeyID != active {
			n += u.Messages
		}
	}
	return n, nil
}

// printKeyUsage prints what every key wraps, and the first messages a
// missing key leaves unreadable.
func printKeyUsage(ctx context.Context, out io.Writer, st *store.Store, ring *crypt.Ring) error {
	uses, err := st.KeyUsage(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSTATE\tMESSAGES\tGROUPS\tEDITS\tINDEX KEY")
	var missing []string
	for _, u := range uses {
		state := "old"
		switch {
		case u.KeyID == "":
			state = "plain text"
		case u.KeyID == ring.Active():
			state = "active"
		case !ring.Has(u.KeyID):
			state = "MISSING"
			missing = append(missing, u.KeyID)
		}
		if !u.Used() && u.KeyID != ring.Active() {
			continue
		}
		id := u.KeyID
		if id == "" {
			id = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%v\n", id, state, u.Messages, u.Groups, u.Edits, u.Index)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, k := range ring.KeyIDs()[1:] {
		if !slices.ContainsFunc(uses, func(u store.KeyUse) bool { return u.KeyID == k && u.Used() }) {
			fmt.Fprintf(out, "key %s wraps nothing any more: it can be removed from DLQ_ENCRYPTION_KEYS\n", k)
		}
	}
	for _, k := range missing {
		ids, err := st.MessagesUnderKey(ctx, k, 0, 20)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "key %s is not configured; messages it leaves unreadable (first %d): %v\n", k, len(ids), ids)
	}
	return nil
}
