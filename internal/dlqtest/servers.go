package dlqtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Commands that inspect and disturb the shared servers. Each can be
// overridden, so that the suite runs where RabbitMQ and PostgreSQL are not
// local Debian packages (containers, another host):
//
//	DLQ_TEST_RABBITMQCTL  the rabbitmqctl command, split on spaces, e.g.
//	                      "docker compose exec -T rabbitmq rabbitmqctl"
//	                      (default: rabbitmqctl from PATH, else /usr/sbin)
//	DLQ_TEST_PG_STOP      a shell command that stops the PostgreSQL server
//	                      of TEST_DATABASE_URL at once, e.g.
//	                      "docker compose stop -t 0 postgres"
//	DLQ_TEST_PG_START     a shell command that starts it again
//
// The PostgreSQL defaults drive the local Debian cluster "main" with
// pg_ctlcluster (found under /etc/postgresql), without systemd.

// Rabbitmqctl returns the rabbitmqctl command with args.
func Rabbitmqctl(ctx context.Context, args ...string) *exec.Cmd {
	cmd := strings.Fields(os.Getenv("DLQ_TEST_RABBITMQCTL"))
	if len(cmd) == 0 {
		path, err := exec.LookPath("rabbitmqctl")
		if err != nil {
			path = "/usr/sbin/rabbitmqctl"
		}
		cmd = []string{path}
	}
	return exec.CommandContext(ctx, cmd[0], append(cmd[1:], args...)...)
}

// RunRabbitmqctl runs rabbitmqctl with args and fails the test with its
// output if it fails.
func RunRabbitmqctl(t testing.TB, timeout time.Duration, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := Rabbitmqctl(ctx, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s (set DLQ_TEST_RABBITMQCTL if rabbitmqctl is elsewhere)", strings.Join(cmd.Args, " "), err, out)
	}
}

// CloseConnection closes, from the broker's side, the connection whose
// connection_name is name, waiting up to 10 s for it to appear. Only that
// connection goes, so tests that use it can run beside others. It returns
// an error rather than failing the test, so it can run in a goroutine.
func CloseConnection(name string) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := Rabbitmqctl(ctx, "list_connections", "-q", "pid", "client_properties").CombinedOutput()
		cancel()
		if err != nil {
			return fmt.Errorf("rabbitmqctl list_connections: %w: %s (set DLQ_TEST_RABBITMQCTL if rabbitmqctl is elsewhere)", err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if !strings.Contains(line, `"`+name+`"`) {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			out, err := Rabbitmqctl(ctx, "close_connection", strings.Fields(line)[0], "dlq test closes it").CombinedOutput()
			cancel()
			if err != nil {
				return fmt.Errorf("rabbitmqctl close_connection for %q: %w: %s", name, err, out)
			}
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no RabbitMQ connection named %q appeared within 10s", name)
}

// PostgresCommand returns the shell command that stops ("stop") or starts
// ("start") the test database's server.
func PostgresCommand(action string) (string, error) {
	env := map[string]string{"stop": "DLQ_TEST_PG_STOP", "start": "DLQ_TEST_PG_START"}[action]
	if env == "" {
		return "", fmt.Errorf("dlqtest: unknown PostgreSQL action %q (stop or start)", action)
	}
	if v := os.Getenv(env); v != "" {
		return v, nil
	}
	entries, err := os.ReadDir("/etc/postgresql")
	if err != nil {
		return "", fmt.Errorf("no local Debian PostgreSQL cluster (%v): set %s", err, env)
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err == nil && e.IsDir() {
			if _, err := os.Stat(filepath.Join("/etc/postgresql", e.Name(), "main")); err != nil {
				continue
			}
			cmd := "pg_ctlcluster --skip-systemctl-redirect " + e.Name() + " main " + action
			if action == "stop" {
				cmd += " -m fast"
			}
			return cmd, nil
		}
	}
	return "", fmt.Errorf("no cluster main under /etc/postgresql: set %s", env)
}

// RunPostgres stops or starts the test database's server, failing the
// test if the command fails.
func RunPostgres(t testing.TB, action string) {
	t.Helper()
	cmd, err := PostgresCommand(action)
	if err != nil {
		t.Fatalf("%s PostgreSQL: %v", action, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "sh", "-c", cmd).CombinedOutput(); err != nil {
		t.Fatalf("%s PostgreSQL with %q: %v: %s", action, cmd, err, out)
	}
}

// PostgresUp reports whether the test database answers.
func PostgresUp() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, DatabaseURLBase())
	if err != nil {
		return false
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx) == nil
}
