package replay

// The local runner loop of a Service: woken by pokes and the database's
// replay events, it starts the tasks that are due and takes back those
// of dead holders (service.go has the requests that create them).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlq/dlq/store"
)

// poke wakes the local runner loop.
func (s *Service) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Service) cancelLocal(id int64) {
	s.mu.Lock()
	r := s.running[id]
	s.mu.Unlock()
	if r != nil {
		r.stop(errCancelled)
	}
}

// Run executes due tasks until ctx ends: it takes tasks no live runner
// holds (at most MaxTasks at once), takes back expired claims, and listens
// for tasks started or cancelled by other instances. When ctx ends it
// stops publishing, waits for the confirms in flight, records their
// outcomes, hands unpublished claims and its tasks back, and returns.
func (s *Service) Run(ctx context.Context) error {
	if s.cfg.Conn == nil {
		return errors.New("replay: Run needs Conn")
	}
	var bg sync.WaitGroup
	bg.Add(2)
	go func() { defer bg.Done(); s.listen(ctx) }()
	go func() { defer bg.Done(); s.recoverLoop(ctx) }()

	var tasks sync.WaitGroup
	defer func() {
		tasks.Wait()
		bg.Wait()
	}()
	backoff := s.cfg.PollInterval
	for ctx.Err() == nil {
		wait := s.cfg.PollInterval
		if s.cfg.Conn.Closed() {
			// Closed for good (its owner is stopping): a task taken now
			// could send nothing, and would be handed back at once, again
			// and again. Take none; the tasks running end and are handed
			// back to be resumed by an instance whose connection is open.
			s.log.Warn("the replay's broker connection is closed; this instance takes no more replay tasks")
			<-ctx.Done()
			break
		}
		if n := s.runningCount(); n < s.cfg.MaxTasks {
			t, ok, err := s.st.AcquireReplayTask(ctx, s.newOwner(), s.cfg.Lease, s.runningIDs())
			switch {
			case err != nil:
				if ctx.Err() != nil {
					break
				}
				s.log.Warn("cannot look for replay tasks; retrying", "error", err, "retry_in", backoff)
				wait = backoff
				backoff = min(backoff*2, 30*time.Second)
			case ok:
				backoff = s.cfg.PollInterval
				r := s.newRun(t)
				tasks.Add(1)
				go func() {
					defer tasks.Done()
					r.run(ctx)
				}()
				continue // maybe more are due
			default:
				backoff = s.cfg.PollInterval
				if next, err := s.st.NextReplayTaskDue(ctx, s.runningIDs()); err == nil {
					wait = untilDue(time.Now(), next, s.cfg.PollInterval)
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-s.wake:
		case <-time.After(wait):
		}
	}
	return nil
}

// untilDue is how long an idle runner sleeps: until the next task may be
// taken (next, zero when none is coming), at most poll, and never less
// than a few milliseconds, so that a moment already past (the clocks of
// dlq and PostgreSQL differ a little) cannot make it spin.
func untilDue(now, next time.Time, poll time.Duration) time.Duration {
	const floor = 10 * time.Millisecond
	if next.IsZero() {
		return poll
	}
	return min(max(next.Sub(now), floor), poll)
}

func (s *Service) newOwner() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s/%s/%d", s.cfg.Name, hex.EncodeToString(b[:]), s.seq.Add(1))
}

func (s *Service) runningCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.running)
}

func (s *Service) runningIDs() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]int64, 0, len(s.running))
	for id := range s.running {
		ids = append(ids, id)
	}
	return ids
}

// listen hears tasks started and cancelled anywhere, so that a cancel
// reaches the runner within a publish wherever it runs, and new tasks start
// without waiting for the poll.
func (s *Service) listen(ctx context.Context) {
	backoff := time.Second
	for ctx.Err() == nil {
		err := s.st.ListenReplayEvents(ctx, func() { backoff = time.Second }, func(e store.ReplayEvent) {
			switch e.Kind {
			case "start":
				s.poke()
			case "cancel":
				s.cancelLocal(e.TaskID)
			}
		})
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("replay notifications lost; listening again (cancels fall back to the lease renewal)", "error", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// recoverLoop takes back claims whose holder stopped renewing them.
func (s *Service) recoverLoop(ctx context.Context) {
	const batch = 1000
	t := time.NewTicker(max(s.cfg.Lease/2, 50*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for ctx.Err() == nil {
			got, err := s.st.RecoverExpiredReplayClaims(ctx, batch)
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("cannot take back expired replay claims", "error", err)
				}
				break
			}
			if got.Taken > 0 {
				s.metrics.recoveries.Add(float64(got.Taken))
				s.metrics.replays.WithLabelValues(resultUnknown).Add(float64(got.Unknown))
				s.metrics.replays.WithLabelValues(resultRepublished).Add(float64(got.Republished))
				s.log.Warn("took back replay claims whose holder stopped; they are pending again",
					"messages", got.Taken, "outcome_unknown", got.Unknown, "to_send_again", got.Retried,
					"never_published", got.Taken-got.Unknown-got.Retried)
			}
			if got.Taken < batch {
				break
			}
		}
	}
}
