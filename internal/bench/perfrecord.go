package bench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// startPerf samples every process on the machine with Linux perf (cpu-clock,
// no call graphs, which PostgreSQL's packaged build has no frame pointers
// for) into path, for the profile of PostgreSQL's side of a drain
// (-pgprofile): pprof sees only this process, and PostgreSQL's backends
// are half of ingest's CPU. `perf report --comm postgres` reads it.
func startPerf(path string) (stop func() error, err error) {
	if _, err := exec.LookPath("perf"); err != nil {
		return nil, fmt.Errorf("-pgprofile needs Linux perf (Debian package linux-perf): %w", err)
	}
	_ = os.Remove(path)
	cmd := exec.Command("perf", "record", "--all-cpus", "--event", "cpu-clock", "--freq", "999", "--quiet", "--output", path)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start perf record to %s: %w", path, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// perf writes its file's header once it samples: the drain must not
	// begin before, or its first batches go unseen.
	for deadline := time.Now().Add(5 * time.Second); ; {
		if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
			break
		}
		select {
		case err := <-exited:
			return nil, fmt.Errorf("perf record to %s ended before sampling (is perf_event_paranoid above 0 for a non-root user?): %v", path, err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return nil, fmt.Errorf("perf record to %s did not start sampling within 5 s", path)
		}
	}
	return func() error {
		// SIGINT is how perf record is told to write its samples and end.
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			return fmt.Errorf("stop perf record: %w", err)
		}
		select {
		case err := <-exited:
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				return fmt.Errorf("perf record to %s: %w", path, err)
			}
			return nil
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			return fmt.Errorf("perf record to %s did not end within 30 s of SIGINT", path)
		}
	}, nil
}
