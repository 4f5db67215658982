package proctest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BuildDLQ returns the dlq binary under test: DLQ_TEST_DLQ_BIN when set (a
// race-enabled build, a candidate fix, or the bin/dlq `make test` builds
// once for every package), else cmd/dlq built into a new temporary
// directory, which cleanup removes. Call it from TestMain.
func BuildDLQ() (bin string, cleanup func(), err error) {
	if bin := os.Getenv("DLQ_TEST_DLQ_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", nil, fmt.Errorf("DLQ_TEST_DLQ_BIN: %w", err)
		}
		return bin, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "dlq-proctest-")
	if err != nil {
		return "", nil, fmt.Errorf("create build directory: %w", err)
	}
	bin = filepath.Join(dir, "dlq")
	build := exec.Command("go", "build", "-o", bin, "github.com/dlq/dlq/cmd/dlq")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("build dlq: %w", err)
	}
	return bin, func() { _ = os.RemoveAll(dir) }, nil
}

// RunWithDLQ is the body of a TestMain: it builds the dlq binary under
// test (BuildDLQ), sets *bin to it, runs m's tests and removes the binary.
// It returns the tests' exit code, or 1 when the build failed (said on
// stderr), for the caller to stop its own servers and os.Exit with.
func RunWithDLQ(m *testing.M, bin *string) int {
	b, cleanup, err := BuildDLQ()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cleanup()
	*bin = b
	return m.Run()
}

// Options start one dlq process.
type Options struct {
	// Bin is the dlq binary. Required.
	Bin string
	// Args are its arguments, e.g. serve. Required.
	Args []string
	// Env holds its DLQ_* settings: it inherits the test's environment
	// without any DLQ_* variable of whoever runs the tests.
	Env map[string]string
	// Log is the file its output is appended to, after a line naming the
	// start. Required.
	Log string
	// N numbers the start in the log and in messages.
	N int
}

// Proc is one dlq process. It is killed when the test ends, if still
// running.
type Proc struct {
	N       int
	cmd     *exec.Cmd
	exited  chan struct{}
	state   *os.ProcessState
	waitErr error
}

// Start runs dlq with o.
func Start(t testing.TB, o Options) *Proc {
	t.Helper()
	f, err := os.OpenFile(o.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	defer f.Close()
	fmt.Fprintf(f, "=== dlq start %d at %s\n", o.N, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(o.Bin, o.Args...)
	cmd.Env = Environ(o.Env)
	cmd.Stdout, cmd.Stderr = f, f
	require.NoError(t, cmd.Start())
	p := &Proc{N: o.N, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.exited)
	}()
	t.Cleanup(func() {
		if !p.Done() {
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// Environ is the test's environment without any DLQ_* variable, plus env.
func Environ(env map[string]string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DLQ_") {
			out = append(out, kv)
		}
	}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// Done reports whether the process has exited.
func (p *Proc) Done() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// Exited is closed once the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Err is how the process ended (exec's Wait error); nil while it runs.
func (p *Proc) Err() error {
	if !p.Done() {
		return nil
	}
	return p.waitErr
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Kill9 kills the process without warning and waits until it is gone.
func (p *Proc) Kill9(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !p.Done() {
		t.Fatalf("kill -9 dlq (start %d): %v", p.N, err)
	}
	<-p.exited
}

// Term sends SIGTERM and waits up to timeout for the process to exit. It
// returns the exit code and how long the exit took.
func (p *Proc) Term(t testing.TB, timeout time.Duration) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.exited:
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Fatalf("dlq (start %d) did not exit within %s of SIGTERM", p.N, timeout)
	}
	return p.state.ExitCode(), time.Since(start)
}
