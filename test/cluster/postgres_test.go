//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/store"
)

// standbyName is the standby's application_name, which
// synchronous_standby_names names.
const standbyName = "dlqstandby"

// pgPair is a PostgreSQL primary and its streaming standby on this
// machine, on ports and in a directory of their own, run as the postgres
// user. Each server is a child of the test process (killed with it), and
// both are stopped and removed when the test ends.
type pgPair struct {
	t        *testing.T
	bin      string
	dir      string
	cred     *syscall.Credential
	primary  *pgServer
	standby  *pgServer
	database string
}

type pgServer struct {
	name   string
	data   string
	port   int
	cmd    *exec.Cmd
	exited chan struct{}
}

// pgBin is the folder of PostgreSQL's server programs: DLQ_TEST_PG_BIN,
// else the highest version under /usr/lib/postgresql.
func pgBin(t *testing.T) string {
	t.Helper()
	if v := os.Getenv("DLQ_TEST_PG_BIN"); v != "" {
		return v
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(a))))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(b))))
		return va - vb
	})
	require.NotEmpty(t, dirs, "no /usr/lib/postgresql/*/bin/initdb: set DLQ_TEST_PG_BIN")
	return filepath.Dir(dirs[len(dirs)-1])
}

// newPGPair creates a primary with a database for dlq, and a standby
// streaming from it; with synchronous, the primary's commits wait for the
// standby (synchronous_standby_names), else replication is asynchronous.
func newPGPair(t *testing.T, synchronous bool) *pgPair {
	t.Helper()
	u, err := user.Lookup("postgres")
	require.NoError(t, err, "the PostgreSQL servers run as the user postgres")
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir, err := os.MkdirTemp("", "dlq-cluster-pg-")
	require.NoError(t, err)
	require.NoError(t, os.Chown(dir, uid, gid))
	p := &pgPair{t: t, bin: pgBin(t), dir: dir, cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, database: "dlq"}
	t.Cleanup(p.close)

	p.primary = &pgServer{name: "primary", data: filepath.Join(dir, "primary"), port: freePort(t)}
	p.run("initdb", "-D", p.primary.data, "-A", "trust", "-U", "postgres", "--no-sync")
	p.configure(p.primary)
	p.start(p.primary)
	p.exec(p.primary, "postgres", "CREATE DATABASE "+p.database)

	p.standby = &pgServer{name: "standby", data: filepath.Join(dir, "standby"), port: freePort(t)}
	p.run("pg_basebackup", "-D", p.standby.data, "-R", "-X", "stream", "-c", "fast",
		"-d", fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s", p.primary.port, standbyName))
	p.configure(p.standby)
	p.start(p.standby)
	// Only now, so that the standby's copy of the settings does not wait
	// for a standby of its own once promoted.
	if synchronous {
		p.exec(p.primary, "postgres", "ALTER SYSTEM SET synchronous_standby_names = '"+standbyName+"'")
		p.exec(p.primary, "postgres", "SELECT pg_reload_conf()")
	}
	want := map[bool]string{true: "sync", false: "async"}[synchronous]
	eventually(t, 60*time.Second, func() (bool, string) {
		state := p.syncState()
		return state == want, fmt.Sprintf("standby sync_state %q, want %q", state, want)
	})
	return p
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// configure gives s its port and socket directory, and room for several
// dlq instances' pools.
func (p *pgPair) configure(s *pgServer) {
	p.t.Helper()
	f, err := os.OpenFile(filepath.Join(s.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(p.t, err)
	defer f.Close()
	_, err = fmt.Fprintf(f, "\nport = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nmax_connections = 200\n", s.port, p.dir)
	require.NoError(p.t, err)
}

// run runs one of PostgreSQL's programs as postgres.
func (p *pgPair) run(prog string, args ...string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(p.bin, prog), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	cmd.Dir = p.dir
	out, err := cmd.CombinedOutput()
	require.NoError(p.t, err, "%s %v: %s", prog, args, out)
}

// start runs postgres for s as a child of the test process and waits
// until it accepts connections.
func (p *pgPair) start(s *pgServer) {
	p.t.Helper()
	log, err := os.OpenFile(filepath.Join(p.dir, s.name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	require.NoError(p.t, err)
	defer log.Close()
	s.cmd = exec.Command(filepath.Join(p.bin, "postgres"), "-D", s.data)
	// A process group of its own, so that cutOff stops its children too.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	s.cmd.Stdout, s.cmd.Stderr = log, log
	require.NoError(p.t, s.cmd.Start())
	s.exited = make(chan struct{})
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	eventually(p.t, 60*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, p.url(s, "postgres"))
		if err != nil {
			return false, fmt.Sprintf("%s not accepting connections: %v", s.name, err)
		}
		_ = conn.Close(ctx)
		return true, ""
	})
}

// crash stops s the way a lost machine does: immediate shutdown (no
// checkpoint; a walsender sends nothing more), and waits until it is gone.
func (p *pgPair) crash(s *pgServer) {
	p.t.Helper()
	require.NoError(p.t, s.cmd.Process.Signal(syscall.SIGQUIT))
	select {
	case <-s.exited:
	case <-time.After(60 * time.Second):
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.exited
	}
}

// cutOff cuts the standby off, as a network partition between the
// servers would: the standby is stopped (SIGSTOP, with its WAL receiver:
// it cannot ask again) and the primary's WAL sender ended, so the
// primary's WAL stops reaching it. It returns once the primary has no
// standby left. reconnect undoes the stop.
func (p *pgPair) cutOff() {
	p.t.Helper()
	require.NoError(p.t, syscall.Kill(-p.standby.cmd.Process.Pid, syscall.SIGSTOP))
	p.exec(p.primary, "postgres", `SELECT pg_terminate_backend(pid) FROM pg_stat_replication`)
	eventually(p.t, 30*time.Second, func() (bool, string) {
		state := p.syncState()
		return state == "none", fmt.Sprintf("the primary still streams to the standby: %s", state)
	})
}

// reconnect lets the standby run again after cutOff.
func (p *pgPair) reconnect() {
	p.t.Helper()
	require.NoError(p.t, syscall.Kill(-p.standby.cmd.Process.Pid, syscall.SIGCONT))
}

// promote promotes the standby and waits until it accepts writes.
func (p *pgPair) promote() {
	p.t.Helper()
	p.run("pg_ctl", "promote", "-w", "-D", p.standby.data)
}

func (p *pgPair) url(s *pgServer, database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, database)
}

// multiHostURL is dlq's URL: both servers, the one that accepts writes.
func (p *pgPair) multiHostURL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write",
		p.primary.port, p.standby.port, p.database)
}

func (p *pgPair) exec(s *pgServer, database, sql string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.url(s, database))
	require.NoError(p.t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	require.NoError(p.t, err, sql)
}

// syncState is the standby's sync_state as the primary reports it.
func (p *pgPair) syncState() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.url(p.primary, "postgres"))
	if err != nil {
		return err.Error()
	}
	defer conn.Close(ctx)
	var state string
	if err := conn.QueryRow(ctx, `SELECT coalesce(max(sync_state), 'none') FROM pg_stat_replication WHERE application_name = $1`, standbyName).Scan(&state); err != nil {
		return err.Error()
	}
	return state
}

// migrated applies dlq's migrations to its database and returns the
// multi-host URL dlq connects with.
func (p *pgPair) migrated() string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := p.multiHostURL()
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 4})
	require.NoError(p.t, err)
	defer st.Close()
	_, err = st.Migrate(ctx, nil)
	require.NoError(p.t, err)
	return dsn
}

// close stops both servers and removes their directory.
func (p *pgPair) close() {
	for _, s := range []*pgServer{p.standby, p.primary} {
		if s == nil || s.cmd == nil {
			continue
		}
		select {
		case <-s.exited:
			continue
		default:
		}
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGCONT) // if cut off
		_ = s.cmd.Process.Signal(syscall.SIGINT)              // fast shutdown
		select {
		case <-s.exited:
		case <-time.After(60 * time.Second):
			_ = s.cmd.Process.Signal(syscall.SIGKILL)
			<-s.exited
		}
	}
	if p.t.Failed() {
		for _, name := range []string{"primary", "standby"} {
			if b, err := os.ReadFile(filepath.Join(p.dir, name+".log")); err == nil {
				lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
				p.t.Logf("PostgreSQL %s log (last lines):\n%s", name, strings.Join(lines[max(0, len(lines)-30):], "\n"))
			}
		}
	}
	_ = os.RemoveAll(p.dir)
}
