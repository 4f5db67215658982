package auth

import (
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// ThrottledError refuses a client that failed to authenticate too often:
// nothing it presents is checked until RetryAfter has passed, so guessing
// tokens costs time, not just requests.
type ThrottledError struct {
	// Client is the address (IPv4) or /64 network (IPv6) being throttled.
	Client string
	// RetryAfter is how long until it may try again.
	RetryAfter time.Duration
}

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("too many failed authentications from %s; retry in %s", e.Client, e.RetryAfter.Round(time.Second))
}

// Failure throttle defaults: ten wrong tokens at once, then one every ten
// seconds — plenty for a person who mistyped, hopeless for a guesser.
const (
	FailureRateDefault  = 0.1
	FailureBurstDefault = 10
)

// maxThrottledClients bounds the memory the throttle holds. Clients whose
// bucket is full again are forgotten first.
const maxThrottledClients = 10000

// failureThrottle is a token bucket per client address, spent by failed
// authentications only.
type failureThrottle struct {
	limit rate.Limit
	burst int

	mu      sync.Mutex
	clients map[string]*rate.Limiter
	// overflow is shared by the clients that find the table full of
	// clients still throttled (an attack from many addresses): they are
	// throttled together rather than not at all.
	overflow *rate.Limiter
}

func newFailureThrottle(r float64, burst int) *failureThrottle {
	if r < 0 {
		return nil
	}
	return &failureThrottle{
		limit: rate.Limit(r), burst: burst,
		clients:  map[string]*rate.Limiter{},
		overflow: rate.NewLimiter(rate.Limit(r), burst),
	}
}

// clientKey is what the throttle counts by: the address itself for IPv4,
// its /64 for IPv6 (one host usually holds a whole /64, so counting single
// IPv6 addresses would throttle nobody).
func clientKey(addr string) string {
	ip := net.ParseIP(addr)
	if ip == nil {
		return addr
	}
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return (&net.IPNet{IP: ip.Mask(net.CIDRMask(64, 128)), Mask: net.CIDRMask(64, 128)}).String()
}

// blocked reports how long client must wait before its next attempt, or
// false when it may try now.
func (f *failureThrottle) blocked(client string, now time.Time) (time.Duration, bool) {
	if f == nil {
		return 0, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	lim := f.clients[client]
	if lim == nil {
		if len(f.clients) < maxThrottledClients {
			return 0, false
		}
		lim = f.overflow
	}
	tokens := lim.TokensAt(now)
	if tokens >= 1 {
		return 0, false
	}
	return time.Duration((1 - tokens) / float64(f.limit) * float64(time.Second)), true
}

// fail spends one token of client's bucket.
func (f *failureThrottle) fail(client string, now time.Time) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	lim := f.clients[client]
	if lim == nil {
		if len(f.clients) >= maxThrottledClients {
			for k, l := range f.clients {
				if l.TokensAt(now) >= float64(f.burst) {
					delete(f.clients, k)
				}
			}
		}
		if len(f.clients) >= maxThrottledClients {
			f.overflow.AllowN(now, 1)
			return
		}
		lim = rate.NewLimiter(f.limit, f.burst)
		f.clients[client] = lim
	}
	lim.AllowN(now, 1)
}
