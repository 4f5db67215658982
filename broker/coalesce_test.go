package broker

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// countingConn records what reaches the socket and in how many writes.
type countingConn struct {
	net.Conn
	mu     sync.Mutex
	writes int
	got    bytes.Buffer
	fail   error
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		return 0, c.fail
	}
	c.writes++
	c.got.Write(p)
	return len(p), nil
}

func (c *countingConn) Close() error { return nil }

func (c *countingConn) snapshot() (int, []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes, bytes.Clone(c.got.Bytes())
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestCoalescingConnGathersSmallWrites(t *testing.T) {
	under := &countingConn{}
	c := newCoalescingConn(under, 50*time.Millisecond)
	var want []byte
	for i := range 100 {
		p := bytes.Repeat([]byte{byte(i)}, 100)
		want = append(want, p...)
		if n, err := c.Write(p); n != len(p) || err != nil {
			t.Fatalf("write %d: n=%d err=%v", i, n, err)
		}
	}
	waitFor(t, "the gathered writes", func() bool { _, got := under.snapshot(); return len(got) == len(want) })
	writes, got := under.snapshot()
	if !bytes.Equal(got, want) {
		t.Fatal("bytes reached the socket changed or out of order")
	}
	// 100 writes within the delay leave in one (or, on a slow machine
	// where the timer fired in between, very few).
	if writes > 5 {
		t.Fatalf("100 small writes made %d socket writes, want them gathered", writes)
	}
}

func TestCoalescingConnLargeWriteKeepsOrder(t *testing.T) {
	under := &countingConn{}
	c := newCoalescingConn(under, time.Hour) // only size and Close flush
	small := []byte("frame-before")
	large := bytes.Repeat([]byte{7}, coalesceMax+1)
	if _, err := c.Write(small); err != nil {
		t.Fatal(err)
	}
	if writes, _ := under.snapshot(); writes != 0 {
		t.Fatalf("a small write went out at once (%d socket writes); want it held", writes)
	}
	if _, err := c.Write(large); err != nil {
		t.Fatal(err)
	}
	writes, got := under.snapshot()
	if writes != 2 || !bytes.Equal(got, append(bytes.Clone(small), large...)) {
		t.Fatalf("after a large write: %d socket writes, %d bytes; want the held bytes first, then the large write", writes, len(got))
	}
	// Writes that overflow the buffer push out what was held first.
	if _, err := c.Write(bytes.Repeat([]byte{1}, coalesceMax-10)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(bytes.Repeat([]byte{2}, 20)); err != nil {
		t.Fatal(err)
	}
	writes, got = under.snapshot()
	if writes != 3 || got[len(got)-1] != 1 {
		t.Fatalf("an overflowing write: %d socket writes; want the held buffer sent before the new bytes are kept", writes)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, got = under.snapshot(); got[len(got)-1] != 2 {
		t.Fatal("Close did not send the bytes still held")
	}
}

func TestCoalescingConnReportsAFailedFlush(t *testing.T) {
	boom := errors.New("connection reset")
	under := &countingConn{fail: boom}
	c := newCoalescingConn(under, time.Millisecond)
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatalf("the first write only gathers; got %v", err)
	}
	waitFor(t, "the failed flush", func() bool {
		_, err := c.Write([]byte("y"))
		return errors.Is(err, boom)
	})
}

func TestCoalescingConnOverAPipe(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	c := newCoalescingConn(a, coalesceDelay)
	msg := bytes.Repeat([]byte("amqp"), 1000)
	go func() {
		for i := 0; i < len(msg); i += 100 {
			if _, err := c.Write(msg[i : i+100]); err != nil {
				return
			}
		}
	}()
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(b, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("bytes read differ from bytes written")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
