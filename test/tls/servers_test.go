//go:build tls

package tls

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The servers' ports: out of the way of the shared servers (5672, 5432)
// and of other tests' extra nodes (5681-5683, 54xx).
const (
	pgPort       = 5491
	rabbitPort   = 5691 // plain AMQP, for setting up
	rabbitTLS    = 5692
	rabbitDist   = 25691
	rabbitNode   = "dlqtls@localhost"
	pgBin        = "/usr/lib/postgresql/15/bin"
	rabbitBinDir = "/usr/lib/rabbitmq/bin"
)

// servers is what TestMain started: their files, certificates and users.
type servers struct {
	dir string
	ca  *ca
	// caFile is the CA every server certificate is signed by; wrongCAFile
	// one that signed nothing here.
	caFile, wrongCAFile string
	// clientCert, clientKey: a client certificate RabbitMQ accepts.
	clientCert, clientKey string
	rabbitUser, rabbitPW  string
	pgUser, pgPW          string
	rabbit                *exec.Cmd
	rabbitDone            chan struct{}
	pgStarted             bool
}

func (s *servers) rabbitEnv() []string {
	return append(os.Environ(),
		"HOME="+filepath.Join(s.dir, "rabbit-home"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(s.dir, "rabbit-env.conf"),
		"RABBITMQ_NODENAME="+rabbitNode,
		"RABBITMQ_NODE_PORT="+strconv.Itoa(rabbitPort),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(rabbitDist),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(s.dir, "rabbitmq.conf"),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(s.dir, "rabbit-mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(s.dir, "rabbit-log"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(s.dir, "rabbit-plugins"),
		"ERL_EPMD_ADDRESS=127.0.0.1",
	)
}

func (s *servers) rabbitctl(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(rabbitBinDir, "rabbitmqctl"), append([]string{"-n", rabbitNode}, args...)...)
	cmd.Env = s.rabbitEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("rabbitmqctl %s: %w: %s", args[0], err, out)
	}
	return nil
}

func asPostgres(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", filepath.Join(pgBin, name)}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", name, err, out)
	}
	return nil
}

func randomText() string { return strings.ToLower(rand.Text()[:20]) }

// startServers makes the certificates and starts both servers.
func startServers(ctx context.Context) (*servers, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("the TLS tests start a RabbitMQ node and a PostgreSQL cluster: run them as root")
	}
	dir, err := os.MkdirTemp("", "dlq-tls-")
	if err != nil {
		return nil, err
	}
	// PostgreSQL runs as postgres and must reach its files.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	s := &servers{dir: dir, rabbitUser: "dlq", rabbitPW: "rmq-" + randomText(), pgUser: "dlq", pgPW: "pg-" + randomText()}
	if s.ca, err = newCA("dlq test CA"); err != nil {
		return nil, err
	}
	wrong, err := newCA("a CA nothing here trusts")
	if err != nil {
		return nil, err
	}
	s.caFile, s.wrongCAFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "wrong-ca.pem")
	if err := os.WriteFile(s.caFile, s.ca.pem, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(s.wrongCAFile, wrong.pem, 0o644); err != nil {
		return nil, err
	}
	certPEM, keyPEM, _, err := s.ca.issue("localhost", true)
	if err != nil {
		return nil, err
	}
	serverCert, serverKey, err := writeFiles(dir, "server", certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, _, err = s.ca.issue("dlq", false)
	if err != nil {
		return nil, err
	}
	if s.clientCert, s.clientKey, err = writeFiles(dir, "client", certPEM, keyPEM); err != nil {
		return nil, err
	}
	if err := s.startRabbit(ctx, serverCert, serverKey); err != nil {
		return s, err
	}
	return s, s.startPostgres(ctx, serverCert, serverKey)
}

func (s *servers) startRabbit(ctx context.Context, serverCert, serverKey string) error {
	for _, d := range []string{"rabbit-home", "rabbit-mnesia", "rabbit-log"} {
		if err := os.MkdirAll(filepath.Join(s.dir, d), 0o700); err != nil {
			return err
		}
	}
	for name, content := range map[string]string{
		"rabbit-home/.erlang.cookie": "DLQTLS" + strings.ToUpper(randomText()),
		"rabbit-env.conf":            "",
		"rabbit-plugins":             "[].\n",
		"rabbitmq.conf": fmt.Sprintf(`listeners.tcp.default = 127.0.0.1:%d
listeners.ssl.default = 127.0.0.1:%d
ssl_options.cacertfile = %s
ssl_options.certfile = %s
ssl_options.keyfile = %s
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = true
loopback_users = none
`, rabbitPort, rabbitTLS, s.caFile, serverCert, serverKey),
	} {
		if err := os.WriteFile(filepath.Join(s.dir, name), []byte(content), 0o400); err != nil {
			return err
		}
	}
	s.rabbit = exec.Command(filepath.Join(rabbitBinDir, "rabbitmq-server"))
	s.rabbit.Env = s.rabbitEnv()
	out, err := os.Create(filepath.Join(s.dir, "rabbit.out"))
	if err != nil {
		return err
	}
	s.rabbit.Stdout, s.rabbit.Stderr = out, out
	if err := s.rabbit.Start(); err != nil {
		return err
	}
	s.rabbitDone = make(chan struct{})
	go func() {
		_ = s.rabbit.Wait()
		out.Close()
		close(s.rabbitDone)
	}()
	// await_startup fails at once while the node has not registered yet.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		err := s.rabbitctl(ctx, "await_startup", "--timeout", "10")
		if err == nil {
			break
		}
		select {
		case <-s.rabbitDone:
			b, _ := os.ReadFile(filepath.Join(s.dir, "rabbit.out"))
			return fmt.Errorf("the RabbitMQ node exited while starting:\n%s", b)
		case <-time.After(time.Second):
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(s.dir, "rabbit.out"))
			return fmt.Errorf("%w\n%s", err, b)
		}
	}
	for _, args := range [][]string{
		{"add_user", s.rabbitUser, s.rabbitPW},
		{"set_permissions", "-p", "/", s.rabbitUser, ".*", ".*", ".*"},
	} {
		if err := s.rabbitctl(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}

func (s *servers) startPostgres(ctx context.Context, serverCert, serverKey string) error {
	pg := filepath.Join(s.dir, "pg")
	if err := os.Mkdir(pg, 0o700); err != nil {
		return err
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	// PostgreSQL wants its key owned by itself and private.
	cert, key := filepath.Join(pg, "server.pem"), filepath.Join(pg, "server.key")
	for src, dst := range map[string]string{serverCert: cert, serverKey: key} {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			return err
		}
	}
	for _, p := range []string{pg, cert, key} {
		if err := os.Chown(p, uid, gid); err != nil {
			return err
		}
	}
	data := filepath.Join(pg, "data")
	if err := asPostgres(ctx, "initdb", "-D", data, "-U", "postgres", "--auth-local=trust", "--auth-host=scram-sha-256"); err != nil {
		return err
	}
	conf := fmt.Sprintf(`
port = %d
listen_addresses = '127.0.0.1'
unix_socket_directories = '%s'
ssl = on
ssl_cert_file = '%s'
ssl_key_file = '%s'
max_connections = 60
`, pgPort, pg, cert, key)
	// Only TLS connections with a password from the network.
	if err := os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte("local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256\n"), 0o600); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(conf)
	f.Close()
	if err != nil {
		return err
	}
	if err := asPostgres(ctx, "pg_ctl", "-D", data, "-l", filepath.Join(pg, "log"), "-w", "-t", "120", "start"); err != nil {
		return err
	}
	s.pgStarted = true
	return asPostgres(ctx, "psql", "-h", pg, "-p", strconv.Itoa(pgPort), "-U", "postgres", "-v", "ON_ERROR_STOP=1",
		"-c", fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", s.pgUser, s.pgPW),
		"-c", fmt.Sprintf("CREATE DATABASE dlq OWNER %s", s.pgUser))
}

// stop stops both servers and removes their files.
func (s *servers) stop() {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if s.pgStarted {
		if err := asPostgres(ctx, "pg_ctl", "-D", filepath.Join(s.dir, "pg", "data"), "-w", "-m", "fast", "stop"); err != nil {
			fmt.Fprintln(os.Stderr, "stop PostgreSQL:", err)
		}
	}
	if s.rabbit != nil {
		if err := s.rabbitctl(ctx, "stop"); err != nil {
			fmt.Fprintln(os.Stderr, "stop RabbitMQ:", err)
			_ = s.rabbit.Process.Kill()
		}
		select {
		case <-s.rabbitDone:
		case <-ctx.Done():
			_ = s.rabbit.Process.Kill()
		}
	}
	_ = os.RemoveAll(s.dir)
}

// pgURL is dlq's database URL on the TLS cluster.
func (s *servers) pgURL(caFile string) string {
	return fmt.Sprintf("postgres://%s:%s@localhost:%d/dlq?sslmode=verify-full&sslrootcert=%s", s.pgUser, s.pgPW, pgPort, caFile)
}

// amqpsURL is dlq's AMQP URL on the TLS listener.
func (s *servers) amqpsURL() string {
	return fmt.Sprintf("amqps://%s:%s@localhost:%d/", s.rabbitUser, s.rabbitPW, rabbitTLS)
}
