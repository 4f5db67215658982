package consumer

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWorkingSinceAgreesWithReady holds WorkingSince to Ready at the
// moment that made them disagree: a worker has marked itself subscribed
// (so Ready says yes) but has not yet recomputed the recorded time. The
// state is set by hand, with no broker, so the window is there every run,
// not only when the scheduler happens to open it (TestWorkingSince).
func TestWorkingSinceAgreesWithReady(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	c := &Consumer{cfg: Config{Now: func() time.Time { return at }}}
	a := &worker{c: c, queue: "orders", tag: "dlq-a"}
	b := &worker{c: c, queue: "orders", tag: "dlq-b"}
	c.workers = []*worker{a, b}

	if !c.WorkingSince().IsZero() {
		t.Fatal("no worker subscribed: WorkingSince must be zero")
	}
	// Both subscribed, as setSubscribed's first half leaves them.
	a.subscribed, b.subscribed = true, true
	if err := c.Ready(); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	if got := c.WorkingSince(); !got.Equal(at) {
		t.Fatalf("Ready says working, WorkingSince = %v, want %v", got, at)
	}
	// A failing write makes the consumer not working, at once.
	b.writeErr = errors.New("connection refused")
	if c.Ready() == nil {
		t.Fatal("Ready with a failing write")
	}
	if got := c.WorkingSince(); !got.IsZero() {
		t.Fatalf("a write fails, WorkingSince = %v, want zero", got)
	}
	// Working again: a new time, not the old one.
	b.writeErr = nil
	at = at.Add(time.Minute)
	if got := c.WorkingSince(); !got.Equal(at) {
		t.Fatalf("working again, WorkingSince = %v, want %v", got, at)
	}
}

// TestWorkingSinceUnderConcurrentChanges reads WorkingSince and Ready
// while the workers subscribe, unsubscribe and clear their write errors,
// for the race detector; once they are all subscribed, the two agree.
func TestWorkingSinceUnderConcurrentChanges(t *testing.T) {
	t.Parallel()
	c := &Consumer{cfg: Config{Now: time.Now}}
	ws := []*worker{{c: c, queue: "q", tag: "a"}, {c: c, queue: "q", tag: "b"}}
	c.workers = ws
	var changers, reader sync.WaitGroup
	done := make(chan struct{})
	reader.Add(1)
	go func() {
		defer reader.Done()
		for {
			select {
			case <-done:
				return
			default:
				_ = c.WorkingSince()
				_ = c.Ready()
			}
		}
	}()
	for _, w := range ws {
		changers.Add(1)
		go func() {
			defer changers.Done()
			for i := range 500 {
				w.setSubscribed(i%3 != 0)
				w.setWriteErr(nil)
			}
			w.setSubscribed(true)
		}()
	}
	changers.Wait()
	close(done)
	reader.Wait()
	if err := c.Ready(); err != nil {
		t.Fatalf("Ready after every worker subscribed: %v", err)
	}
	if c.WorkingSince().IsZero() {
		t.Fatal("every worker subscribed and writing, WorkingSince is zero")
	}
}

// TestDefaultNameIsNewPerProcess: two consumers that share a hostname and
// a pid (a container restarted in place runs as pid 1 again) get
// different names, so their consumer tags and their ingest_inflight
// batches are told apart: the cleanup of stale batches skips only the
// calling process's own.
func TestDefaultNameIsNewPerProcess(t *testing.T) {
	t.Parallel()
	var a, b Config
	a.setDefaults()
	b.setDefaults()
	if a.Name == b.Name {
		t.Fatalf("two default names are both %q", a.Name)
	}
	if !strings.Contains(a.Name, fmt.Sprintf("-%d-", os.Getpid())) {
		t.Fatalf("default name %q does not name the pid %d", a.Name, os.Getpid())
	}
}
