//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/internal/proctest"
)

// maxUpgradeGap is the longest the upgrade may leave dead letters
// uncommitted while they keep arriving: what the issue asks of a rolling
// upgrade ("no ingest gap longer than a couple of seconds"). A migration
// may stall ingest for about a second (store.MaxMigrationStall); the rest
// is a loaded machine's scheduling.
const maxUpgradeGap = 2 * time.Second

// upgradeParams are the test's sizes, which make bench-upgrade sets larger.
type upgradeParams struct {
	// fill dead letters are stored by the earlier version before the
	// upgrade, as fast as it takes them.
	fill int
	// rate is the traffic's dead letters per second during the roll.
	rate int
	// instances of the earlier version are replaced one by one.
	instances int
	// backfillWatch, when set, watches the backfill for that long instead
	// of waiting for its whole pass (hours at 10,000,000 rows), and the
	// run goes on with the rows it has not reached: reads derive them.
	backfillWatch time.Duration
}

func upgradeParamsFromEnv(t *testing.T) upgradeParams {
	t.Helper()
	p := upgradeParams{fill: 40_000, rate: 1000, instances: 2}
	for name, dst := range map[string]*int{
		"DLQ_TEST_UPGRADE_FILL": &p.fill, "DLQ_TEST_UPGRADE_RATE": &p.rate, "DLQ_TEST_UPGRADE_INSTANCES": &p.instances,
	} {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			require.NoError(t, err, name)
			*dst = n
		}
	}
	if v := os.Getenv("DLQ_TEST_UPGRADE_BACKFILL_WATCH"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "DLQ_TEST_UPGRADE_BACKFILL_WATCH (a duration, such as 10m)")
		p.backfillWatch = d
	}
	return p
}

// upgradeDatabase is the upgrade's database: a schema of its own in
// DLQ_TEST_UPGRADE_DATABASE_URL's database when set (bench-upgrade: the
// bench database), else a new database on the test server, whose public
// schema both versions lock alike for their migrations.
func upgradeDatabase(t *testing.T) string {
	t.Helper()
	base := os.Getenv("DLQ_TEST_UPGRADE_DATABASE_URL")
	if base == "" {
		return dlqtest.Database(t)
	}
	ctx := context.Background()
	schema := dlqtest.Name(t, "upgrade")
	conn, err := pgx.Connect(ctx, base)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	require.NoError(t, err)
	if os.Getenv("DLQ_TEST_UPGRADE_KEEP") == "" {
		t.Cleanup(func() {
			c, err := pgx.Connect(context.Background(), base)
			if err == nil {
				_, _ = c.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
				_ = c.Close(context.Background())
			}
		})
	}
	return dlqtest.WithSearchPath(base, schema)
}

// TestUpgradeFromEarlierVersion is the rolling upgrade of docs/UPGRADING.md
// with real processes: instances of the earlier version (EarlierVersion,
// built from git history) store dead letters while traffic keeps
// arriving; this version's instances start one by one beside them (the
// first migrates the schema online while the earlier ones ingest), each
// replacing one earlier instance, which stops. Then it counts the jepsen
// way, lost, duplicated and unexpected all zero, and measures the longest
// time no dead letter was committed while they kept arriving (asserted
// under maxUpgradeGap). The backfill then gives every row the earlier
// version stored its death record and category, and --status says
// nothing is left. Then the roll back: the earlier version runs again on
// the migrated schema, reads the rows this version wrote and ingests; and
// forward again, the backfill catching up with what it stored.
//
// DLQ_TEST_UPGRADE_FILL, _RATE and _INSTANCES size it (make bench-upgrade:
// 1,000,000 rows, three instances).
func TestUpgradeFromEarlierVersion(t *testing.T) {
	p := upgradeParamsFromEnv(t)
	earlier := earlierDLQ(t)
	dsn := upgradeDatabase(t)
	u := &upgrade{t: t, p: p, d: newDeployment(t, deployOpts{dsn: dsn, instances: 2 * p.instances})}
	// Slots 0..n-1 run the earlier version, n..2n-1 this one.
	for i := range p.instances {
		u.d.instances[i].bin = earlier
		u.d.instances[p.instances+i].env = map[string]string{
			// The backfill within seconds, not after a minute, under a
			// lease as long as at the default schedule.
			"DLQ_CRON_BACKFILLS": "@every 2s",
			"DLQ_CRON_LEASE_TTL": "30s",
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	u.d.rejecter(ctx)

	fillMax := u.fill(ctx)
	rollEnd := u.roll(ctx)
	if p.backfillWatch > 0 {
		u.backfillWatched(fillMax)
	} else {
		u.backfilled(fillMax, rollEnd)
	}
	u.rollBack(ctx)
	// And forward again: the backfill takes what the earlier version
	// stored meanwhile.
	u.d.start(p.instances)
	u.d.waitReady(p.instances, 3*time.Minute)
	u.d.stop(0)
	if p.backfillWatch == 0 {
		waitBackfilled(t, u.d, 5*time.Minute)
	}
	u.d.stopAll()
	u.d.requireQueuesEmpty()
	u.d.requireExact(u.d.check())
}

// upgrade is one run of TestUpgradeFromEarlierVersion.
type upgrade struct {
	t *testing.T
	p upgradeParams
	d *deployment
}

// fill starts the earlier version's instances and has them store p.fill
// dead letters; it returns the highest id they stored.
func (u *upgrade) fill(ctx context.Context) int64 {
	t, d := u.t, u.d
	began := time.Now()
	for i := range u.p.instances {
		d.start(i)
	}
	for i := range u.p.instances {
		d.waitReady(i, 3*time.Minute)
	}
	fill := d.publish(ctx, u.p.fill, 0, nil, proctest.ViaTTL, proctest.ViaReject, proctest.ViaDirect, proctest.ViaDirect)
	fill.Wait(t, time.Duration(u.p.fill/200+120)*time.Second)
	d.waitDrained(time.Duration(u.p.fill/200+120) * time.Second)
	var fillMax int64
	d.query(func(ctx context.Context) error {
		return d.db.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM dead_messages`).Scan(&fillMax)
	})
	t.Logf("MEASURED the earlier version (%s) stored %d dead letters in %s", EarlierVersion, d.rowCount(), time.Since(began).Round(time.Second))
	return fillMax
}

// roll replaces the earlier instances with this version's, one by one,
// while dead letters keep arriving at p.rate, and checks the longest
// commit gap and the count; it returns when the last earlier one stopped.
func (u *upgrade) roll(ctx context.Context) time.Time {
	t, d := u.t, u.d
	tctx, stopTraffic := context.WithCancel(ctx)
	defer stopTraffic()
	traffic := d.publish(tctx, u.p.rate*3600, u.p.rate, nil, proctest.ViaTTL, proctest.ViaReject, proctest.ViaDirect, proctest.ViaDirect)
	time.Sleep(3 * time.Second) // traffic flowing before the first new instance starts
	rollStart := time.Now()
	for i := range u.p.instances {
		slot := u.p.instances + i
		startedAt := time.Now()
		d.start(slot)
		d.waitReady(slot, 30*time.Minute)
		t.Logf("MEASURED instance %d (this version) ready %s after its start", slot, time.Since(startedAt).Round(100*time.Millisecond))
		if i == 0 {
			// The instance logs how long each migration took, and how many
			// attempts the lock timeouts made it take.
			for _, line := range d.logLines(slot, "migrations applied") {
				t.Logf("MEASURED instance %d: %s", slot, line)
			}
		}
		// Both versions ingest side by side for a moment.
		before := ingestedBy(t, d, i)
		eventually(t, time.Minute, func() (bool, string) {
			now := ingestedBy(t, d, i)
			return now > before, fmt.Sprintf("instance %d (earlier version) ingested nothing on the migrated schema (%v dead letters)", i, now)
		})
		d.stop(i)
	}
	rollEnd := time.Now()
	time.Sleep(3 * time.Second)
	stopTraffic()
	traffic.Wait(t, time.Minute)
	trafficEnd := time.Now()
	d.waitDrained(3 * time.Minute)
	t.Logf("MEASURED the roll of %d instances took %s", u.p.instances, rollEnd.Sub(rollStart).Round(100*time.Millisecond))

	gap, at := longestCommitGap(t, d, rollStart.Add(-2*time.Second), trafficEnd.Add(-time.Second))
	t.Logf("MEASURED longest time without a committed dead letter during the roll: %s (at %s, %s after the roll began)",
		gap.Round(time.Millisecond), at.Format("15:04:05.000"), at.Sub(rollStart).Round(100*time.Millisecond))
	require.Less(t, gap, maxUpgradeGap, "ingest stalled during the upgrade")
	d.requireExact(d.check())
	return rollEnd
}

// backfilled waits for the backfill to give every row the earlier version
// stored (ids up to fillMax and after) its death record and category, and
// checks them, what this version reads of both versions' rows, and that
// --status finds nothing left.
func (u *upgrade) backfilled(fillMax int64, rollEnd time.Time) {
	t, d := u.t, u.d
	began := time.Now()
	waitBackfilled(t, d, time.Duration(u.p.fill/100+300)*time.Second)
	t.Logf("MEASURED the backfill older_rows caught up %s after the roll ended (%s after this check began)",
		time.Since(rollEnd).Round(time.Second), time.Since(began).Round(time.Second))
	require.Zero(t, d.count("id <= $1 AND reason = 'expired' AND category <> 'transient'", fillMax),
		"an expired dead letter the earlier version stored is transient (default rules)")
	require.Zero(t, d.count("id <= $1 AND failure_message LIKE '%failed validation' AND category <> 'permanent'", fillMax),
		"a validation failure the earlier version stored is permanent (default rules)")
	require.Positive(t, d.count("id <= $1 AND category = 'permanent'", fillMax))
	requireNoMisreads(t, d, u.p.instances, fillMax)
	code, out := migrateStatus(t, d)
	require.Equal(t, 0, code, "dlq migrate --status after the upgrade:\n%s", out)
	require.Regexp(t, `older_rows +idle`, out)
}

// backfillWatched is backfilled for a run too large to wait for the
// whole pass: it watches the pass for p.backfillWatch, logging its
// progress each minute, then measures its rate, shows what dlq migrate
// --status says meanwhile (running, with a rate and an estimate), and
// checks the rows it has done and what this version reads of an earlier
// row it may not have reached.
func (u *upgrade) backfillWatched(fillMax int64) {
	t, d := u.t, u.d
	began, left0 := time.Now(), d.count("x_death IS NULL")
	left := left0
	for time.Since(began) < u.p.backfillWatch && left > 0 {
		time.Sleep(min(time.Minute, u.p.backfillWatch-time.Since(began)))
		left = d.count("x_death IS NULL")
		t.Logf("backfill older_rows: %d rows left after %s", left, time.Since(began).Round(time.Second))
	}
	took := time.Since(began)
	rate := float64(left0-left) / took.Seconds()
	require.Positive(t, rate, "the backfill older_rows did no row in %s", took.Round(time.Second))
	t.Logf("MEASURED the backfill older_rows did %d rows in %s (%.0f rows/s); %d rows left, about %s more at that rate",
		left0-left, took.Round(time.Second), rate, left, (time.Duration(float64(left)/rate) * time.Second).Round(time.Minute))
	code, out := migrateStatus(t, d)
	t.Logf("dlq migrate --status while the backfill runs:\n%s", out)
	if left > 0 {
		require.Equal(t, 6, code, "dlq migrate --status with a backfill under way:\n%s", out)
		require.Regexp(t, `older_rows +running since`, out)
	}
	require.Zero(t, d.count("id <= $1 AND x_death IS NOT NULL AND reason = 'expired' AND category <> 'transient'", fillMax),
		"an expired dead letter the earlier version stored is transient once backfilled (default rules)")
	require.Zero(t, d.count("id <= $1 AND x_death IS NOT NULL AND failure_message LIKE '%failed validation' AND category <> 'permanent'", fillMax),
		"a validation failure the earlier version stored is permanent once backfilled (default rules)")
	requireNoMisreads(t, d, u.p.instances, fillMax)
}

// rollBack stops this version's instances and starts an earlier one on
// the migrated schema: it reads a row this version wrote, and ingests.
func (u *upgrade) rollBack(ctx context.Context) {
	t, d := u.t, u.d
	for i := range u.p.instances {
		d.stop(u.p.instances + i)
	}
	var lastNew int64
	d.query(func(ctx context.Context) error {
		return d.db.QueryRow(ctx, `SELECT max(id) FROM dead_messages`).Scan(&lastNew)
	})
	d.start(0)
	d.waitReady(0, 3*time.Minute)
	var m struct {
		ID int64 `json:"id"`
	}
	require.NoError(t, d.api(0, http.MethodGet, fmt.Sprintf("/api/v1/messages/%d", lastNew), nil, &m),
		"the earlier version reads a row this version wrote")
	require.Equal(t, lastNew, m.ID)
	back := d.publish(ctx, 3*u.p.rate, u.p.rate, nil, proctest.ViaTTL, proctest.ViaReject, proctest.ViaDirect)
	back.Wait(t, 2*time.Minute)
	d.waitDrained(2 * time.Minute)
	require.Positive(t, d.count("id > $1 AND x_death IS NULL", lastNew), "the earlier version ingested after the roll back")
	d.requireExact(d.check())
}

// waitBackfilled waits until every row has its death record: the
// backfill older_rows has done every row the earlier version stored. It
// asks once a second (a count of what is left costs the database
// something while many are).
func waitBackfilled(t *testing.T, d *deployment, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		left := d.count("x_death IS NULL")
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %d rows still without a death record", timeout, left)
		}
		time.Sleep(time.Second)
	}
}

// ingestedBy sums instance i's dlq_messages_ingested_total.
func ingestedBy(t *testing.T, d *deployment, i int) float64 {
	t.Helper()
	code, body, err := proctest.Get(d.instances[i].addr, "/metrics")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	var sum float64
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "dlq_messages_ingested_total{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		require.NoError(t, err, line)
		sum += v
	}
	return sum
}

// longestCommitGap is the longest time between two consecutive ingest
// transactions that committed rows in [from, to], and when it began. A
// row's status_changed_at is its transaction's start (DEFAULT now()),
// which ingest of both versions leaves to the default, and dead letters
// arrive throughout: a stall shows as a gap between two batches' starts.
func longestCommitGap(t *testing.T, d *deployment, from, to time.Time) (time.Duration, time.Time) {
	t.Helper()
	var gap time.Duration
	var at time.Time
	d.query(func(ctx context.Context) error {
		return d.db.QueryRow(ctx, `
SELECT coalesce(max(next - t), '0'), coalesce((array_agg(t ORDER BY next - t DESC))[1], now())
FROM (SELECT t, lead(t) OVER (ORDER BY t) AS next
      FROM (SELECT DISTINCT status_changed_at AS t FROM dead_messages WHERE status_changed_at BETWEEN $1 AND $2) b) g
WHERE next IS NOT NULL`, from, to).Scan(&gap, &at)
	})
	return gap, at
}

// requireNoMisreads reads rows of both versions through this version's
// API (slot) and checks what each shows: the death record of a row the
// earlier version stored is its headers' (derived or backfilled), as for
// a row this version stored.
func requireNoMisreads(t *testing.T, d *deployment, slot int, fillMax int64) {
	t.Helper()
	var older, newer int64
	d.query(func(ctx context.Context) error {
		return d.db.QueryRow(ctx, `SELECT min(id) FILTER (WHERE id <= $1 AND reason = 'rejected'), max(id) FILTER (WHERE reason = 'rejected')
FROM dead_messages`, fillMax).Scan(&older, &newer)
	})
	for _, id := range []int64{older, newer} {
		var m struct {
			XDeath []struct {
				Queue  string `json:"queue"`
				Reason string `json:"reason"`
				Count  int64  `json:"count"`
			} `json:"x_death"`
			Category string `json:"category"`
		}
		require.NoError(t, d.api(slot, http.MethodGet, fmt.Sprintf("/api/v1/messages/%d", id), nil, &m))
		require.NotEmpty(t, m.XDeath, "message %d has its death record", id)
		require.Equal(t, "rejected", m.XDeath[0].Reason, "message %d", id)
		require.Positive(t, m.XDeath[0].Count, "message %d", id)
		require.NotEqual(t, "", m.Category, "message %d", id)
	}
}

// migrateStatus runs this version's dlq migrate --status on the
// deployment's database.
func migrateStatus(t *testing.T, d *deployment) (int, string) {
	t.Helper()
	cmd := exec.Command(dlqBin, "migrate", "--status")
	cmd.Env = proctest.Environ(map[string]string{"DLQ_DATABASE_URL": d.dsn})
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return code, string(out)
}
