package api_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// recordingReplayer stands in for the replay service in handler tests: it
// records tasks in memory and never publishes. The replay service has its
// own tests against RabbitMQ; these check only what the HTTP layer adds
// (auth, scope, validation, status codes, JSON shape).
type recordingReplayer struct {
	mu    sync.Mutex
	tasks []replay.Task
}

func (r *recordingReplayer) Start(_ context.Context, req replay.Request, a store.Actor) (replay.Task, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now().UTC()
	t := replay.Task{ID: int64(len(r.tasks) + 1), Status: "running", Requested: int64(len(req.IDs)), Request: req,
		DryRun: req.DryRun, CreatedBy: a.Name, CreatedAt: now, StartAt: now}
	if req.DryRun {
		t.Status = "dry_run"
		return t, nil
	}
	r.tasks = append(r.tasks, t)
	return t, nil
}

func (r *recordingReplayer) Get(_ context.Context, id int64) (replay.Task, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id < 1 || id > int64(len(r.tasks)) {
		return replay.Task{}, fmt.Errorf("replay task %d: %w", id, store.ErrNotFound)
	}
	return r.tasks[id-1], nil
}

func (r *recordingReplayer) List(_ context.Context, limit int) ([]replay.Task, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []replay.Task{}
	for i := len(r.tasks) - 1; i >= 0 && len(out) < limit; i-- {
		out = append(out, r.tasks[i])
	}
	return out, nil
}

func (r *recordingReplayer) Cancel(_ context.Context, id int64, _ store.Actor) (replay.Task, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id < 1 || id > int64(len(r.tasks)) {
		return replay.Task{}, fmt.Errorf("replay task %d: %w", id, store.ErrNotFound)
	}
	t := &r.tasks[id-1]
	if t.Status == "canceled" {
		return *t, fmt.Errorf("replay task %d already canceled: %w", id, store.ErrConflict)
	}
	t.Status = "canceled"
	return *t, nil
}
