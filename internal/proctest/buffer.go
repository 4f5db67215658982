package proctest

import (
	"bytes"
	"sync"
)

// LockedBuffer is a log sink a test reads while the code under test writes
// to it from another goroutine; a bare bytes.Buffer would race.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
