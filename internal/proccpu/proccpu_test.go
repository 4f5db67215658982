package proccpu

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseStat(t *testing.T) {
	// A real line's shape; the command name holds a space and a ')'.
	line := "4242 (postgres: a) b) S 1 4242 4242 0 -1 4194560 1200 0 0 0 731 269 0 0 20 0 1 0 123 456 789\n"
	ticks, err := ParseStat([]byte(line))
	require.NoError(t, err)
	require.EqualValues(t, 731+269, ticks)

	for _, bad := range []string{"", "1 (x S 1 2", "1 (x) S 1 2 3", "1 (x) S 1 2 3 4 5 6 7 8 9 10 a 3", "1 (x) S 1 2 3 4 5 6 7 8 9 10 -5 3"} {
		_, err := ParseStat([]byte(bad))
		require.Error(t, err, "%q", bad)
	}
}

// TestOfThisProcess reads this test's own CPU time after it burnt some,
// and refuses a wrong command name or pid.
func TestOfThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system")
	}
	comm, err := os.ReadFile("/proc/self/comm")
	require.NoError(t, err)
	name := string(comm[:len(comm)-1])
	before, ok := Of(os.Getpid(), name)
	require.True(t, ok)
	// Spin until the reading grows by 50 ms of CPU. A fixed wall time of
	// spinning is not enough CPU on a loaded machine (the suite runs
	// beside other packages' tests on two cores): the deadline is only a
	// bound for a reading that never grows.
	deadline := time.Now().Add(20 * time.Second)
	x, cpu := 0, before
	for cpu-before < 50*time.Millisecond && time.Now().Before(deadline) {
		for range 100_000 {
			x++
		}
		cpu, ok = Of(os.Getpid(), name)
		require.True(t, ok)
	}
	require.GreaterOrEqual(t, cpu-before, 50*time.Millisecond, "spun %d times in 20 s and the reading did not grow by 50 ms", x)

	_, ok = Of(os.Getpid(), "postgres-not-me")
	require.False(t, ok, "another command name")
	_, ok = Of(0, name)
	require.False(t, ok)

	// A child that has exited and been reaped has no /proc entry.
	sh, err := exec.LookPath("true")
	if err == nil {
		cmd := exec.Command(sh)
		require.NoError(t, cmd.Run())
		_, ok = Of(cmd.Process.Pid, filepath.Base(sh))
		require.False(t, ok, "a process that is gone")
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("4242 (postgres) S 1 4242 4242 0 -1 4194560 1200 0 0 0 731 269 0 0 20 0 1 0 123 456 789\n"))
	f.Add([]byte("1 ((()) R 0 0 0 0 0 0 0 0 0 0 9223372036854775807 9223372036854775807"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ticks, err := ParseStat(b)
		if err == nil && ticks < 0 {
			t.Fatalf("negative ticks %d from %q", ticks, b)
		}
	})
}
