package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrLeaseLost means a cron job's lease is no longer held with the token
// the caller has: another instance took the job (or it expired and was taken
// again). The write was not made.
var ErrLeaseLost = errors.New("job lease lost")

// Job run outcomes, as stored in job_runs.outcome.
const (
	JobRunning   = "running"
	JobSuccess   = "success"
	JobFailure   = "failure"
	JobLeaseLost = "lease_lost"
	// JobSkipped: the tick was claimed by the instance holding the job
	// while its previous run was still going, and a later tick came before
	// that run ended (or the instance stopped). See package cron.
	JobSkipped       = "skipped"
	jobErrorMaxBytes = 2000
)

// Lease is one holding of a cron job's lease. Every write a job makes passes
// it, and is refused with ErrLeaseLost once the token is no longer current.
type Lease struct {
	Job    string
	Holder string
	Token  int64
}

// JobRunStart is a claimed tick: the run's row and the lease it runs under.
type JobRunStart struct {
	RunID int64
	Lease Lease
}

// leaseAcquireLockTimeout bounds the wait for the lease row. The row is
// locked only briefly by a renewal, or for one batch by the holder's fenced
// transaction; an instance that cannot get it at once is not the holder.
const leaseAcquireLockTimeout = "250ms"

// fenceIdleTimeout ends the session of a fenced transaction whose client
// stopped talking (a paused or partitioned process). Such a transaction
// holds the lease row FOR SHARE, which would otherwise keep every other
// instance from taking the job for as long as the pause lasts.
const fenceIdleTimeout = 5 * time.Second

// BeginJobRun takes job's lease for holder and claims tick. The lease is
// taken when it is free, expired, or already holder's; its token grows by one
// whenever it is taken anew (from another holder, or after it expired, even
// by the holder it had) and stays the same while one holder keeps it live.
// Taking it anew closes the runs of earlier tokens still marked running as
// lease_lost: nobody is left to finish them, and none of their writes can
// commit any more. ok is false, with no error, when another instance holds
// the lease or has already claimed this tick: that is the normal outcome on
// every instance but one.
//
// It first looks, without locking anything. An instance that finds the tick
// claimed or the lease live in another's hands gives up there: it must not
// queue on the lease row, where it would delay (and under load, time out) the
// holder's own claim, so that the tick ran nowhere. The holder of a live
// lease claims the tick without locking the lease row either: that row may be
// held FOR SHARE for a while by the fenced writes of its run in progress (a
// tick claimed then waits for that run; see package cron). Only a free or
// expired lease is taken under the row lock, by whichever instance locks it
// first.
func (s *Store) BeginJobRun(ctx context.Context, job, holder string, tick time.Time, ttl time.Duration) (run JobRunStart, ok bool, err error) {
	return s.beginJobRun(ctx, job, holder, tick, ttl, false)
}

// BeginFirstJobRun is BeginJobRun for a process that has not held job's
// lease yet (a scheduler's first claim of the job): it takes the lease
// anew, under a new token, even when the lease is holder's and still live.
// A process restarted under the same name (DLQ_INSTANCE) before its lease
// expired would otherwise carry on with its previous self's token: that
// one's run would stay running for ever, and its writes, were it only
// paused, would still pass the fence.
func (s *Store) BeginFirstJobRun(ctx context.Context, job, holder string, tick time.Time, ttl time.Duration) (run JobRunStart, ok bool, err error) {
	return s.beginJobRun(ctx, job, holder, tick, ttl, true)
}

func (s *Store) beginJobRun(ctx context.Context, job, holder string, tick time.Time, ttl time.Duration, anew bool) (run JobRunStart, ok bool, err error) {
	var claimed, live bool
	var leaseHolder string
	var leaseToken int64
	err = s.pool.QueryRow(ctx, `
SELECT EXISTS (SELECT 1 FROM job_runs WHERE job = $1 AND tick = $2),
       coalesce(l.holder, ''), coalesce(l.token, 0), coalesce(l.expires_at > now(), false)
FROM (SELECT) AS one LEFT JOIN job_leases l ON l.job = $1`, job, tick).Scan(&claimed, &leaseHolder, &leaseToken, &live)
	if err != nil {
		return JobRunStart{}, false, fmt.Errorf("store: look at lease of job %s for tick %s: %w", job, tick.Format(time.RFC3339Nano), err)
	}
	switch {
	case claimed:
		return JobRunStart{}, false, nil // this tick is already someone's
	case live && leaseHolder != holder:
		return JobRunStart{}, false, nil // held by another instance
	case live && !anew:
		// Ours, live: claim the tick under the token we hold, if it is still
		// current and live as the insert reads it. Otherwise (it expired just
		// now) take it like any instance would. The lease is extended too,
		// unless its row is locked (by the fenced writes or the renewal of
		// the run in progress, which keeps it anyway): SKIP LOCKED, never
		// wait.
		var id int64
		err = s.pool.QueryRow(ctx, `
WITH extend AS (
    UPDATE job_leases SET expires_at = greatest(expires_at, now() + $5 * interval '1 millisecond')
    WHERE job = $1 AND holder = $3 AND token = $4 AND expires_at > now()
      AND job IN (SELECT job FROM job_leases WHERE job = $1 FOR NO KEY UPDATE SKIP LOCKED)
)
INSERT INTO job_runs (job, tick, instance, token)
SELECT job, $2, holder, token FROM job_leases
WHERE job = $1 AND holder = $3 AND token = $4 AND expires_at > now()
ON CONFLICT (job, tick) DO NOTHING
RETURNING id`, job, tick, holder, leaseToken, ttl.Milliseconds()).Scan(&id)
		if err == nil {
			return JobRunStart{RunID: id, Lease: Lease{Job: job, Holder: holder, Token: leaseToken}}, true, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return JobRunStart{}, false, fmt.Errorf("store: claim tick %s of job %s (token %d): %w", tick.Format(time.RFC3339Nano), job, leaseToken, err)
		}
	}
	return s.takeLeaseAndClaim(ctx, job, holder, tick, ttl, anew)
}

// takeLeaseAndClaim takes a free or expired lease (or re-takes holder's own)
// and claims tick, in one transaction. The token stays only when holder
// re-takes its own live lease and anew is false.
func (s *Store) takeLeaseAndClaim(ctx context.Context, job, holder string, tick time.Time, ttl time.Duration, anew bool) (run JobRunStart, ok bool, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return JobRunStart{}, false, fmt.Errorf("store: begin run of job %s: %w", job, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, leaseAcquireLockTimeout); err != nil {
		return JobRunStart{}, false, fmt.Errorf("store: begin run of job %s: %w", job, err)
	}
	var token int64
	var changedHands bool
	// An expired lease is taken under a new token even by the holder it
	// had: that holder stopped renewing it (it died, or was restarted under
	// the same name), and its runs must be closed and fenced out as another
	// instance's would be.
	err = tx.QueryRow(ctx, `
INSERT INTO job_leases AS l (job, holder, token, acquired_at, expires_at)
VALUES ($1, $2, 1, now(), now() + $3 * interval '1 millisecond')
ON CONFLICT (job) DO UPDATE SET
    token = CASE WHEN l.holder = EXCLUDED.holder AND l.expires_at > now() AND NOT $4 THEN l.token ELSE l.token + 1 END,
    acquired_at = CASE WHEN l.holder = EXCLUDED.holder AND l.expires_at > now() AND NOT $4 THEN l.acquired_at ELSE now() END,
    holder = EXCLUDED.holder,
    expires_at = EXCLUDED.expires_at
WHERE l.expires_at <= now() OR l.holder = EXCLUDED.holder
RETURNING token, acquired_at = now()`, job, holder, ttl.Milliseconds(), anew).Scan(&token, &changedHands)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return JobRunStart{}, false, nil // held by another instance
	case isLockTimeout(err):
		return JobRunStart{}, false, nil // being taken by another instance right now
	case err != nil:
		return JobRunStart{}, false, fmt.Errorf("store: take lease of job %s for %s: %w", job, holder, err)
	}
	if changedHands {
		// Runs of earlier tokens still marked running were abandoned by a
		// holder that died, restarted or lost the lease without recording
		// their end: this holder's own earlier process too. (One that is
		// only paused overwrites this if it ever resumes; its writes fail.)
		_, err = tx.Exec(ctx, `
UPDATE job_runs SET outcome = 'lease_lost', finished_at = now(), error = $3
WHERE job = $1 AND outcome = 'running' AND token < $2`, job, token,
			fmt.Sprintf("abandoned: its holder stopped renewing the lease (it died or restarted); %s took the job with token %d", holder, token))
		if err != nil {
			return JobRunStart{}, false, fmt.Errorf("store: close abandoned runs of job %s: %w", job, err)
		}
	}
	var id int64
	err = tx.QueryRow(ctx, `
INSERT INTO job_runs (job, tick, instance, token) VALUES ($1, $2, $3, $4)
ON CONFLICT (job, tick) DO NOTHING
RETURNING id`, job, tick, holder, token).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return JobRunStart{}, false, nil // this tick already ran elsewhere
	}
	if err != nil {
		return JobRunStart{}, false, fmt.Errorf("store: claim tick %s of job %s: %w", tick.Format(time.RFC3339Nano), job, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return JobRunStart{}, false, fmt.Errorf("store: commit start of job %s tick %s: %w", job, tick.Format(time.RFC3339Nano), err)
	}
	return JobRunStart{RunID: id, Lease: Lease{Job: job, Holder: holder, Token: token}}, true, nil
}

// StartJobRun marks claimed run id as started now: a claimed tick that had
// to wait for the previous run records when it really began.
func (s *Store) StartJobRun(ctx context.Context, id int64) error {
	if _, err := s.pool.Exec(ctx, `UPDATE job_runs SET started_at = now() WHERE id = $1`, id); err != nil {
		return fmt.Errorf("store: record start of job run %d: %w", id, err)
	}
	return nil
}

// RenewLease extends l for another ttl. It returns ErrLeaseLost when the
// token is no longer current.
func (s *Store) RenewLease(ctx context.Context, l Lease, ttl time.Duration) error {
	tag, err := s.pool.Exec(ctx, `
UPDATE job_leases SET expires_at = now() + $4 * interval '1 millisecond'
WHERE job = $1 AND holder = $2 AND token = $3`, l.Job, l.Holder, l.Token, ttl.Milliseconds())
	if err != nil {
		return fmt.Errorf("store: renew lease of job %s (token %d): %w", l.Job, l.Token, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("store: renew lease of job %s (token %d): %w", l.Job, l.Token, ErrLeaseLost)
	}
	return nil
}

// FinishJobRun records how run id ended. It is not fenced: the row belongs
// to the run, and recording that it lost its lease is the point.
func (s *Store) FinishJobRun(ctx context.Context, id int64, outcome string, rows int64, runErr error) error {
	var msg *string
	if runErr != nil {
		m := runErr.Error()
		if len(m) > jobErrorMaxBytes {
			m = m[:jobErrorMaxBytes] + "…"
		}
		msg = nullText(m)
	}
	_, err := s.pool.Exec(ctx, `
UPDATE job_runs SET finished_at = now(), outcome = $2, rows_affected = $3, error = $4 WHERE id = $1`,
		id, outcome, rows, msg)
	if err != nil {
		return fmt.Errorf("store: record end of job run %d (%s): %w", id, outcome, err)
	}
	return nil
}

// JobRun is one recorded run.
type JobRun struct {
	ID           int64      `json:"id"`
	Job          string     `json:"job"`
	Tick         time.Time  `json:"tick"`
	Instance     string     `json:"instance"`
	Token        int64      `json:"token"`
	StartedAt    time.Time  `json:"started_at"`
	FinishedAt   *time.Time `json:"finished_at"`
	Outcome      string     `json:"outcome"`
	RowsAffected int64      `json:"rows_affected"`
	Error        string     `json:"error,omitempty"`
}

// JobRuns returns the most recent runs, newest first: of one job, or of
// every job when job is "".
//
// A run still marked running is shown as lease_lost (abandoned) when
// nothing holds it any more: its job's lease expired, moved to a later
// token, or is gone. Its finished_at is then when that was last known to
// change: the lease's expiry, or when the later token took it. The
// stored row is left as it is; it is closed for good by the next take of
// the lease (takeLeaseAndClaim), which may never come when the job was
// switched off or every instance stopped. Not writing it here keeps a read
// a read (it may be served by a read-only role), and keeps it honest the
// other way too: a holder that was only paused past its expiry, with
// nobody taking the job meanwhile, may still renew its lease and finish
// the run (RenewLease checks the token, not the expiry), and the run reads
// as running again.
func (s *Store) JobRuns(ctx context.Context, job string, limit int) ([]JobRun, error) {
	rows, err := s.pool.Query(ctx, `
SELECT r.id, r.job, r.tick, r.instance, r.token, r.started_at,
       CASE WHEN a.why IS NULL THEN r.finished_at ELSE a.since END,
       CASE WHEN a.why IS NULL THEN r.outcome ELSE 'lease_lost' END,
       r.rows_affected, coalesce(a.why, r.error, '')
FROM job_runs r
LEFT JOIN job_leases l ON l.job = r.job
LEFT JOIN LATERAL (
    SELECT CASE
        WHEN l.job IS NULL THEN 'abandoned: the job has no lease any more, so nothing runs it'
        WHEN l.token > r.token THEN format('abandoned: its holder lost the lease, which %s took with token %s at %s',
            l.holder, l.token, to_char(l.acquired_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
        ELSE format('abandoned: its holder stopped renewing the lease (it died, restarted or the job was switched off), which expired at %s and was not taken again',
            to_char(l.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
        END AS why,
        CASE WHEN l.token > r.token THEN l.acquired_at ELSE l.expires_at END AS since
    WHERE r.outcome = 'running' AND (l.job IS NULL OR l.token > r.token OR l.expires_at <= now())
) a ON true
WHERE $1 = '' OR r.job = $1
ORDER BY r.started_at DESC, r.id DESC LIMIT $2`, job, limit)
	if err != nil {
		return nil, fmt.Errorf("store: list runs of job %q: %w", job, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (JobRun, error) {
		var j JobRun
		err := r.Scan(&j.ID, &j.Job, &j.Tick, &j.Instance, &j.Token, &j.StartedAt, &j.FinishedAt, &j.Outcome, &j.RowsAffected, &j.Error)
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: list runs of job %q: %w", job, err)
	}
	return out, nil
}

// JobLease is a lease as stored.
type JobLease struct {
	Job        string    `json:"job"`
	Holder     string    `json:"holder"`
	Token      int64     `json:"token"`
	AcquiredAt time.Time `json:"acquired_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	// Held is expires_at > now() by the database clock.
	Held bool `json:"held"`
}

// JobLeases returns every job's lease.
func (s *Store) JobLeases(ctx context.Context) ([]JobLease, error) {
	rows, err := s.pool.Query(ctx, `
SELECT job, holder, token, acquired_at, expires_at, expires_at > now() FROM job_leases ORDER BY job`)
	if err != nil {
		return nil, fmt.Errorf("store: list job leases: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (JobLease, error) {
		var l JobLease
		err := r.Scan(&l.Job, &l.Holder, &l.Token, &l.AcquiredAt, &l.ExpiresAt, &l.Held)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: list job leases: %w", err)
	}
	return out, nil
}

// LastJobSuccesses returns, per job, when its last successful run finished.
// One index probe per job.
func (s *Store) LastJobSuccesses(ctx context.Context, jobs []string) (map[string]time.Time, error) {
	rows, err := s.pool.Query(ctx, `
SELECT j.job, (SELECT max(r.finished_at) FROM job_runs r WHERE r.job = j.job AND r.outcome = 'success')
FROM unnest($1::text[]) AS j(job)`, jobs)
	if err != nil {
		return nil, fmt.Errorf("store: read last successful job runs: %w", err)
	}
	defer rows.Close()
	out := make(map[string]time.Time, len(jobs))
	for rows.Next() {
		var job string
		var at *time.Time
		if err := rows.Scan(&job, &at); err != nil {
			return nil, fmt.Errorf("store: read last successful job runs: %w", err)
		}
		if at != nil {
			out[job] = *at
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: read last successful job runs: %w", err)
	}
	return out, nil
}

// DeleteJobRunsBefore deletes up to limit finished job runs that started
// before cutoff, under l. Two runs of each job are kept however old they
// are: its newest run, so the last outcome stays visible, and its newest
// successful run, which dlq_job_last_success_timestamp_seconds (and so
// DLQJobStale) and GET /api/v1/jobs read. Deleting a job's last success
// while it keeps failing would drop that series, and the stale alert would
// resolve exactly when the job had been failing longest.
func (s *Store) DeleteJobRunsBefore(ctx context.Context, l Lease, cutoff time.Time, limit int) (int64, error) {
	var n int64
	err := s.fenced(ctx, l, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
DELETE FROM job_runs WHERE id IN (
    SELECT r.id FROM job_runs r
    WHERE r.started_at < $1 AND r.outcome <> 'running'
      AND r.tick < (SELECT max(x.tick) FROM job_runs x WHERE x.job = r.job)
      AND (r.outcome <> 'success' OR EXISTS (
          SELECT 1 FROM job_runs y
          WHERE y.job = r.job AND y.outcome = 'success' AND y.finished_at > r.finished_at))
    ORDER BY r.started_at LIMIT $2)`, cutoff, limit)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: delete job runs before %s: %w", cutoff.Format(time.RFC3339), err)
	}
	return n, nil
}

// fenced runs fn in a transaction that first checks, holding the lease row
// FOR SHARE until commit, that l is still current. A new holder's
// acquisition waits for this transaction, so whatever fn writes commits
// before anyone else can run the job, or not at all. The transaction's
// session is ended by PostgreSQL if the client goes quiet inside it (a
// paused process), which releases the lease row.
func (s *Store) fenced(ctx context.Context, l Lease, fn func(tx pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	var ok bool
	err = tx.QueryRow(ctx, `
SELECT set_config('idle_in_transaction_session_timeout', $4, true) IS NOT NULL
FROM job_leases WHERE job = $1 AND holder = $2 AND token = $3
FOR SHARE`, l.Job, l.Holder, l.Token, strconv.FormatInt(fenceIdleTimeout.Milliseconds(), 10)).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("job %s token %d held by %s: %w", l.Job, l.Token, l.Holder, ErrLeaseLost)
	}
	if err != nil {
		return fmt.Errorf("check lease of job %s: %w", l.Job, err)
	}
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03" // lock_not_available
}
