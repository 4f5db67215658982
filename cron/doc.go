// Package cron runs dlq's cron jobs: summary reconciliation, retention
// cleanup, capacity enforcement and alert evaluation, each on exactly one
// instance per tick however many `dlq serve` instances share the database.
// It holds the fenced scheduler (scheduler.go, run.go, schedule.go), the
// Service that registers the jobs (service.go), the view GET /api/v1/jobs
// shows (jobs.go), and one file per job. What the cleanup and capacity jobs
// delete is decided in package cleanup; what the alert job evaluates and
// whom it tells, in package alerts.
//
// # Ticks, leases and fencing
//
// Every instance schedules every job (robfig/cron, with panic recovery), so
// a job does not depend on any one instance staying up. A tick is a job's
// scheduled time slot: the activation time of its schedule, which every
// instance computes alike (cron expressions in UTC, and "@every d" aligned to
// multiples of d since the Unix epoch rather than to process start). The
// cron library is only the clock: it hands each activation, in order, to the
// job's claim loop on this instance, which claims the ticks one after the
// other and passes the claimed ones to the job's run loop. A tick is named by
// the activation itself, never by reading the clock later, so a loaded
// machine cannot make an instance claim the wrong tick. At each tick every
// instance tries to claim it:
//
//  1. it first looks, locking nothing: if the tick is already claimed, or
//     the job's lease (job_leases: holder, token, expires_at) is live in
//     another instance's hands, it stops there. Instances that were only
//     going to give up therefore never queue on the lease row, where under
//     load they used to make the holder's own claim time out;
//  2. the holder of a live lease claims the tick under its token: INSERT
//     INTO job_runs (job, tick) ON CONFLICT DO NOTHING, checked against the
//     lease in the same statement, without waiting for the lease row (its
//     run in progress may hold it); the lease is extended when its row is
//     free;
//  3. otherwise the lease is free or expired, and is taken under the row
//     lock in one transaction with the claim, by whichever instance locks
//     it first. The token grows by one whenever the lease is taken anew:
//     from another holder, or after it expired even by the holder it had.
//     A process's first claim of a job takes the lease anew even when it is
//     live in its own instance's name (a restart with the same
//     DLQ_INSTANCE). Taking it anew closes the runs of earlier tokens still
//     marked running as lease_lost: their holder is gone, and none of their
//     writes can commit any more.
//
// (job, tick) is unique in job_runs, so a tick is claimed at most once in the
// cluster; only the claimant runs it. A run starts by renewing the lease (if
// it is already lost, the run is recorded as lease_lost and does not start)
// and renews it every TTL/3 while it runs. Every write the job makes is fenced: the store runs
// it in a transaction that first locks the lease row FOR SHARE where token =
// the run's token, so an acquisition by another instance waits for the
// write to commit, and a write after the token moved on finds no row and
// fails with store.ErrLeaseLost. A paused (SIGSTOP) or partitioned former
// holder therefore cannot write after losing the lease; if it was paused
// inside a fenced transaction, PostgreSQL ends its session after a few
// idle seconds (idle_in_transaction_session_timeout), which releases the
// row. A holder that dies stops renewing; its lease expires after the TTL
// (by default the job's interval, at most 30 s) and the first tick after
// that runs on another instance. The ticks in between are not claimed by
// anyone: nobody can tell a dead holder from a slow one before its lease
// expires. (Nor is a tick at which no instance's cron loop woke at all: a
// process that gets no CPU for a whole interval misses that activation in
// the cron library itself.)
//
// # A run still going at the next tick
//
// Only one run of a job is in progress at a time: the lease is live while
// it runs, so only its instance can claim the next tick, and that instance's
// run loop runs its claimed ticks one at a time, in order. Every tick is
// therefore run exactly once, or skipped for one reason only, and then
// recorded:
//
//   - A tick claimed while the previous run is still going waits for it and
//     runs as soon as it ends: a run that overruns its interval delays the
//     next tick, it does not lose it.
//   - At most one tick waits. When a later tick comes while the run still
//     goes on, the waiting tick is skipped: recorded in job_runs with
//     outcome "skipped" and the error "skipped: run N (tick T) was still
//     running on INSTANCE when tick U came", counted in
//     dlq_job_runs_total{outcome="skipped"} and logged at warn. The latest
//     tick is the one that runs when the long run ends.
//   - A tick claimed or waiting when its instance stops is recorded as
//     skipped too ("the instance stopped ...").
//
// Claims are not held up by runs, and a slow claim only delays the next
// claim (the activations queue): before, one flag covered claim and run, so
// an instance whose claim of the previous tick was merely slow under load
// dropped the next tick as "still running", and when every instance did,
// that tick ran nowhere. A run's started_at is when it began; for a tick
// that waited, that is when the previous run ended.
//
// A panic inside a job is recovered by the scheduler, recorded as a failed
// run with its stack, and the process carries on.
//
// Runs are recorded in job_runs (tick, instance, token, start, end, outcome
// running | success | failure | lease_lost | skipped, rows affected, error), listed by GET /api/v1/jobs and counted in
// dlq_job_runs_total{job,outcome}, dlq_job_duration_seconds{job} and
// dlq_job_last_success_timestamp_seconds{job} (read from job_runs, so every
// instance exports the cluster-wide value).
//
// # The jobs
//
//   - summary (summary.go): queue_summary is maintained by every writer in
//     its own transaction; this job proves it and repairs drift, counting
//     repairs in dlq_summary_repairs_total. A pass recounts each source
//     queue in one snapshot and applies the difference as an increment (see
//     store.ReconcileQueue), so it never locks writers out. The first pass
//     is the bootstrap of an existing table; passes repeat every
//     ReconcileInterval and spread over ticks within a time budget. A run
//     that stops saves the last queue it did; the next continues after it
//     in byte order (COLLATE "C"), whatever the database's collation.
//   - cleanup (cleanup.go): retention and expiry, package cleanup's
//     Cleaner.DeleteExpired: replayed and acknowledged messages older than
//     their retention, in batches, then expired control-command answers,
//     finished replay tasks, old job runs, stale ingest_inflight batches
//     and, if configured, old audit rows.
//   - capacity (capacity.go): package cleanup's Cleaner.EnforceCapacity
//     keeps the store under max_messages and max_bytes by evicting the
//     oldest resolved messages first, pending ones only when allowed.
//   - alerts (alerts.go): loads the saved alert state, reads a snapshot from
//     the summary, evaluates the rules (package alerts), saves the new
//     state under the lease and then notifies, so an instance that lost the
//     lease sends nothing. Package alerts never touches the database; this
//     job is its seam to the store. dlq_alerts_firing{rule} is read from
//     the saved state on scrape, on every instance (see below).
//   - backfills (backfills.go): the work over existing rows that migrations
//     leave to it (store/backfill.go): a pass over the rows a backfill
//     still has to do, by id, a fenced batch per transaction, saving its
//     place, half the time working; the next tick, on any instance, goes
//     on where it stopped.
//
// # Metrics read on scrape
//
// dlq_dead_messages{source_queue,status}, dlq_dead_message_bytes,
// dlq_oldest_pending_age_seconds{source_queue} and dlq_capacity_used_ratio
// come from a collector that reads queue_summary and one index probe per
// queue on each scrape: O(queues), never a scan of dead_messages, and the
// same on every instance (status.go). dlq_alerts_firing{rule} comes from
// the saved alert state (one row, read at most once a second), so an
// instance that does not run the alert job, or no longer does, reports what
// the last evaluation found, not what it last saw itself. A state past its
// stale_after (alerts.StaleBound of the evaluating instance's schedule: no
// evaluation for three ticks) reports nothing firing and dlq_alerts_stale
// 1, and GET /api/v1/alerts shows it stale, its alerts unknown.
//
// # Reads that must not outlive their writer
//
// A job run marked running whose lease expired or moved on (its holder
// died, and perhaps nobody runs the job any more) is read as lease_lost
// (store.JobRuns); the alert state is read as stale once evaluations stop.
// Neither read waits for the job to run again, which may never happen.
package cron
