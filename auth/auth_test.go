package auth

import (
	"strings"
	"testing"

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
