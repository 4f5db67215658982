package auth

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	a, err := New(Config{
		AdminToken: "admin-secret",
		Tokens: []Token{
			{Name: "ops", Token: "ops-secret", Role: RoleOperator, Queues: []string{"orders"}},
			{Name: "view", TokenSHA256: Digest("view-secret"), Role: RoleViewer},
			{Name: "view-bodies", Token: "vb-secret", Role: RoleViewer, Bodies: true},
		},
	})
	require.NoError(t, err)
	require.False(t, a.Open())

	p, err := a.Authenticate("admin-secret")
	require.NoError(t, err)
	require.Equal(t, Principal{Name: "admin", Role: RoleAdmin, Bodies: true}, p)
	p, err = a.Authenticate("ops-secret")
	require.NoError(t, err)
	require.Equal(t, Principal{Name: "ops", Role: RoleOperator, Queues: []string{"orders"}, Bodies: true}, p)
	require.True(t, p.SeesQueue("orders"))
	require.False(t, p.SeesQueue("billing"))
	p, err = a.Authenticate("view-secret")
	require.NoError(t, err, "a token configured by its digest")
	require.False(t, p.Bodies)
	p, _ = a.Authenticate("vb-secret")
	require.True(t, p.Bodies)

	_, err = a.Authenticate("")
	require.ErrorIs(t, err, ErrNoToken)
	for _, bad := range []string{"admin-secre", "admin-secret ", "ADMIN-SECRET", Digest("view-secret")} {
		_, err = a.Authenticate(bad)
		require.ErrorIs(t, err, ErrBadToken, "%q", bad)
	}
	// The plaintext is not kept.
	for _, e := range a.entries {
		require.NotContains(t, string(e.digest[:]), "secret")
	}
}

func TestRolesAreOrdered(t *testing.T) {
	t.Parallel()
	v, o, ad := Principal{Role: RoleViewer}, Principal{Role: RoleOperator}, Principal{Role: RoleAdmin}
	require.True(t, v.Can(RoleViewer))
	require.False(t, v.Can(RoleOperator))
	require.True(t, o.Can(RoleOperator))
	require.False(t, o.Can(RoleAdmin))
	require.True(t, ad.Can(RoleViewer) && ad.Can(RoleOperator) && ad.Can(RoleAdmin))
	require.False(t, Principal{Role: "root"}.Can(RoleViewer))
}

func TestConfigErrorsNameTheToken(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Tokens: []Token{{Token: "x", Role: RoleAdmin}}}, "tokens[0]: name is required"},
		{Config{Tokens: []Token{{Name: "a", Role: RoleAdmin}}}, "exactly one of token and token_sha256"},
		{Config{Tokens: []Token{{Name: "a", Token: "x", TokenSHA256: Digest("x"), Role: RoleAdmin}}}, "exactly one of"},
		{Config{Tokens: []Token{{Name: "a", TokenSHA256: "abc", Role: RoleAdmin}}}, "token_sha256 must be 64 hex digits"},
		{Config{Tokens: []Token{{Name: "a", Token: "x", Role: "root"}}}, `role "root"`},
		{Config{Tokens: []Token{{Name: "a", Token: "x", Role: RoleViewer}, {Name: "a", Token: "y", Role: RoleViewer}}}, `tokens[1]: name "a" is used twice`},
		{Config{AdminToken: "x", Tokens: []Token{{Name: "b", Token: "x", Role: RoleViewer}}}, `same secret as token "admin"`},
		{Config{Tokens: []Token{{Name: "a", Token: "x", Role: RoleViewer, Queues: []string{" "}}}}, "empty name"},
	} {
		_, err := New(c.cfg)
		require.Error(t, err)
		require.True(t, strings.Contains(err.Error(), c.want), "%v does not contain %q", err, c.want)
	}
}

func TestOpenAndRateLimit(t *testing.T) {
	t.Parallel()
	a, err := New(Config{})
	require.NoError(t, err)
	require.True(t, a.Open())
	p, err := a.Authenticate("anything")
	require.NoError(t, err)
	require.Equal(t, RoleAdmin, p.Role)

	a, err = New(Config{Tokens: []Token{{Name: "a", Token: "a", Role: RoleViewer}, {Name: "b", Token: "b", Role: RoleViewer}}, RatePerSecond: 1, Burst: 3})
	require.NoError(t, err)
	pa, _ := a.Authenticate("a")
	pb, _ := a.Authenticate("b")
	allowed := 0
	for range 10 {
		if a.Allow(pa) {
			allowed++
		}
	}
	require.Equal(t, 3, allowed, "the burst, then refused")
	require.True(t, a.Allow(pb), "each token has its own bucket")

	a, err = New(Config{Tokens: []Token{{Name: "a", Token: "a", Role: RoleViewer}}, RatePerSecond: -1})
	require.NoError(t, err)
	for range 1000 {
		require.True(t, a.Allow(pa))
	}
}

// TestFailureThrottle: wrong tokens spend a per-address bucket; once it is
// empty every request from that address is refused, the right token too,
// until it refills; other addresses and missing tokens are not affected.
func TestFailureThrottle(t *testing.T) {
	t.Parallel()
	a, err := New(Config{AdminToken: "admin-secret", FailureRate: 0.5, FailureBurst: 3})
	require.NoError(t, err)
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	a.now = func() time.Time { return now }

	for range 3 {
		_, err := a.AuthenticateFrom("10.0.0.1", "guess")
		require.ErrorIs(t, err, ErrBadToken)
	}
	_, err = a.AuthenticateFrom("10.0.0.1", "admin-secret")
	var te *ThrottledError
	require.ErrorAs(t, err, &te, "the right token is not even checked while throttled")
	require.Equal(t, "10.0.0.1", te.Client)
	require.Equal(t, 2*time.Second, te.RetryAfter, "one token at 0.5/s")

	// Another address, and a request without a token, are unaffected.
	p, err := a.AuthenticateFrom("10.0.0.2", "admin-secret")
	require.NoError(t, err)
	require.Equal(t, "admin", p.Name)
	for range 5 {
		_, err = a.AuthenticateFrom("10.0.0.3", "")
		require.ErrorIs(t, err, ErrNoToken)
	}

	// Refilled: one more try.
	now = now.Add(2 * time.Second)
	_, err = a.AuthenticateFrom("10.0.0.1", "admin-secret")
	require.NoError(t, err)
	_, err = a.AuthenticateFrom("10.0.0.1", "guess")
	require.ErrorIs(t, err, ErrBadToken)
	_, err = a.AuthenticateFrom("10.0.0.1", "guess")
	require.ErrorAs(t, err, &te)

	// IPv6 is counted per /64.
	for range 3 {
		_, err = a.AuthenticateFrom("2001:db8:1:2::1", "guess")
		require.ErrorIs(t, err, ErrBadToken)
	}
	_, err = a.AuthenticateFrom("2001:db8:1:2::ffff", "admin-secret")
	require.ErrorAs(t, err, &te)
	require.Equal(t, "2001:db8:1:2::/64", te.Client)
	_, err = a.AuthenticateFrom("2001:db8:1:3::1", "admin-secret")
	require.NoError(t, err)

	// Negative disables it.
	off, err := New(Config{AdminToken: "admin-secret", FailureRate: -1})
	require.NoError(t, err)
	for range 50 {
		_, err = off.AuthenticateFrom("10.0.0.1", "guess")
		require.ErrorIs(t, err, ErrBadToken)
	}
}

// TestFailureThrottleIsBounded: a flood of addresses does not grow the
// table past its bound, and addresses beyond it are throttled together.
func TestFailureThrottleIsBounded(t *testing.T) {
	t.Parallel()
	f := newFailureThrottle(0.001, 1)
	now := time.Now()
	for i := range maxThrottledClients + 50 {
		f.fail(fmt.Sprintf("k%d", i), now)
	}
	require.Len(t, f.clients, maxThrottledClients)
	_, blocked := f.blocked("a-new-client", now)
	require.True(t, blocked, "the overflow bucket is spent")
	// Once the tracked clients' buckets are full again they are forgotten.
	later := now.Add(2000 * time.Second)
	f.fail("another", later)
	require.Len(t, f.clients, 1)
}

// TestLookup: a name resolves to the token's principal as configured, an
// unknown name to nothing; with no token only the anonymous admin exists.
func TestLookup(t *testing.T) {
	t.Parallel()
	a, err := New(Config{AdminToken: "admin-secret", Tokens: []Token{
		{Name: "ops", Token: "ops-secret", Role: RoleOperator, Queues: []string{"orders"}},
	}})
	require.NoError(t, err)
	p, ok := a.Lookup("ops")
	require.True(t, ok)
	byToken, err := a.Authenticate("ops-secret")
	require.NoError(t, err)
	require.Equal(t, byToken, p)
	p, ok = a.Lookup("admin")
	require.True(t, ok)
	require.Equal(t, RoleAdmin, p.Role)
	_, ok = a.Lookup("gone")
	require.False(t, ok)
	_, ok = a.Lookup(AnonymousName)
	require.False(t, ok, "no anonymous caller while tokens are configured")

	open, err := New(Config{})
	require.NoError(t, err)
	p, ok = open.Lookup(AnonymousName)
	require.True(t, ok)
	require.Equal(t, RoleAdmin, p.Role)
	_, ok = open.Lookup("ops")
	require.False(t, ok)
}
