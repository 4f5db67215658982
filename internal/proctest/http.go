package proctest

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FreeAddr returns a loopback address with a port free right now, for a
// dlq process's HTTP server.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// Get fetches path from the dlq HTTP server at addr.
func Get(addr, path string) (int, string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// WaitReady polls p's /readyz at addr until it answers 200, failing the
// test if p exits first or timeout passes.
func WaitReady(t testing.TB, p *Proc, addr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		if p.Done() {
			t.Fatalf("dlq (start %d) exited while waiting for readiness: %v", p.N, p.Err())
		}
		code, body, err := Get(addr, "/readyz")
		if err == nil && code == http.StatusOK {
			return
		}
		last = fmt.Sprintf("status %d, body %s, error %v", code, body, err)
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("dlq (start %d) not ready after %s: %s", p.N, timeout, last)
}

// Metric returns the value of one sample from /metrics at addr, e.g.
// `dlq_up{component="postgres"}`.
func Metric(addr, sample string) (float64, error) {
	code, body, err := Get(addr, "/metrics")
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("/metrics answered %d", code)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("no sample %s in /metrics", sample)
}
