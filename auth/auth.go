package auth

import (
	"cmp"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/time/rate"
)

// Token is one configured token. Its YAML form is an item of the api.tokens
// list.
type Token struct {
	// Name identifies the token in audit rows and logs. Required, unique.
	Name string `yaml:"name"`
	// Token is the secret. Either Token or TokenSHA256 is required.
	Token string `yaml:"token"`
	// TokenSHA256 is the hex SHA-256 digest of the secret, so the secret
	// need not appear in the configuration.
	TokenSHA256 string `yaml:"token_sha256"`
	// TokenFile is a file holding the secret (a container secret, private
	// to its owner), read by package config into Token.
	TokenFile string `yaml:"token_file"`
	// Role is viewer, operator or admin. Required.
	Role string `yaml:"role"`
	// Queues restricts the token to these source queues. Optional; empty
	// means every queue.
	Queues []string `yaml:"queues"`
	// Bodies lets a viewer see message bodies. Operators and admins always
	// may.
	Bodies bool `yaml:"bodies"`
}

// Validate checks a token and names the wrong field.
func (t Token) Validate() error {
	if strings.TrimSpace(t.Name) == "" {
		return errors.New("name is required")
	}
	if (t.Token == "") == (t.TokenSHA256 == "") {
		return fmt.Errorf("token %q: exactly one of token and token_sha256 is required", t.Name)
	}
	if t.TokenSHA256 != "" {
		if b, err := hex.DecodeString(t.TokenSHA256); err != nil || len(b) != sha256.Size {
			return fmt.Errorf("token %q: token_sha256 must be 64 hex digits (sha256sum of the token)", t.Name)
		}
	}
	if rank[t.Role] == 0 {
		return fmt.Errorf("token %q: role %q must be viewer, operator or admin", t.Name, t.Role)
	}
	for _, q := range t.Queues {
		if strings.TrimSpace(q) == "" {
			return fmt.Errorf("token %q: queues must not contain an empty name", t.Name)
		}
	}
	return nil
}

// Config configures an Authenticator.
type Config struct {
	// AdminToken is DLQ_ADMIN_TOKEN: a token named "admin" with the admin
	// role. Optional.
	AdminToken string
	// Tokens are the configured tokens. Optional.
	Tokens []Token
	// RatePerSecond is each token's sustained request rate. Optional;
	// default 50. Negative disables rate limiting.
	RatePerSecond float64
	// Burst is each token's burst. Optional; default 2 × RatePerSecond.
	Burst int
	// FailureRate is how many failed authentications per second one
	// client address may sustain (AuthenticateFrom): once its burst is
	// spent, it is refused without its token being looked at until the
	// bucket refills. Optional; default FailureRateDefault. Negative
	// disables the throttle.
	FailureRate float64
	// FailureBurst is how many failed authentications a client may make
	// at once. Optional; default FailureBurstDefault.
	FailureBurst int
}

// Defaults.
const (
	RatePerSecondDefault = 50
)

// Errors of Authenticate.
var (
	// ErrNoToken means the request carries no token while tokens are
	// configured.
	ErrNoToken = errors.New("missing bearer token")
	// ErrBadToken means the token matches no configured token.
	ErrBadToken = errors.New("invalid token")
)

// AnonymousName is the principal name used when no token is configured.
const AnonymousName = "anonymous"

// anonymousAdmin is every caller when no token is configured.
var anonymousAdmin = Principal{Name: AnonymousName, Role: RoleAdmin, Bodies: true}

type entry struct {
	digest    [sha256.Size]byte
	principal Principal
	limiter   *rate.Limiter
}

// Authenticator checks tokens and rate limits. It is safe for concurrent
// use.
type Authenticator struct {
	entries   []entry
	anonymous *rate.Limiter
	failures  *failureThrottle
	now       func() time.Time
}

// New builds an Authenticator. An error names the wrong token.
func New(cfg Config) (*Authenticator, error) {
	r := cmp.Or(cfg.RatePerSecond, RatePerSecondDefault)
	limit := rate.Limit(r)
	burst := cmp.Or(cfg.Burst, int(2*r))
	if r < 0 {
		limit, burst = rate.Inf, 0
	}
	burst = max(burst, 1)
	if cfg.FailureBurst < 0 {
		return nil, fmt.Errorf("auth: FailureBurst must be >= 0, got %d", cfg.FailureBurst)
	}
	a := &Authenticator{
		anonymous: rate.NewLimiter(limit, burst),
		failures:  newFailureThrottle(cmp.Or(cfg.FailureRate, FailureRateDefault), max(1, cmp.Or(cfg.FailureBurst, FailureBurstDefault))),
		now:       time.Now,
	}
	tokens := cfg.Tokens
	offset := 0
	if cfg.AdminToken != "" {
		tokens = append([]Token{{Name: "admin", Token: cfg.AdminToken, Role: RoleAdmin}}, tokens...)
		offset = 1
	}
	label := func(i int) string {
		if i < offset {
			return "DLQ_ADMIN_TOKEN"
		}
		return fmt.Sprintf("tokens[%d]", i-offset)
	}
	names := map[string]bool{}
	for i, t := range tokens {
		if err := t.Validate(); err != nil {
			return nil, fmt.Errorf("auth: %s: %w", label(i), err)
		}
		if names[t.Name] {
			return nil, fmt.Errorf("auth: %s: name %q is used twice (DLQ_ADMIN_TOKEN is named admin)", label(i), t.Name)
		}
		names[t.Name] = true
		e := entry{limiter: rate.NewLimiter(limit, burst)}
		if t.Token != "" {
			e.digest = sha256.Sum256([]byte(t.Token))
		} else {
			b, _ := hex.DecodeString(t.TokenSHA256)
			copy(e.digest[:], b)
		}
		for _, o := range a.entries {
			if o.digest == e.digest {
				return nil, fmt.Errorf("auth: %s (%s): same secret as token %q", label(i), t.Name, o.principal.Name)
			}
		}
		var queues []string
		if len(t.Queues) > 0 {
			queues = append([]string(nil), t.Queues...)
		}
		e.principal = Principal{Name: t.Name, Role: t.Role, Queues: queues, Bodies: t.Bodies || t.Role != RoleViewer}
		a.entries = append(a.entries, e)
	}
	return a, nil
}

// Open reports whether no token is configured: every caller is then an
// anonymous admin, which is only acceptable on a loopback address.
func (a *Authenticator) Open() bool { return len(a.entries) == 0 }

// Authenticate returns the principal of a bearer token. With no token
// configured it returns the anonymous admin whatever it is given.
func (a *Authenticator) Authenticate(token string) (Principal, error) {
	if a.Open() {
		return anonymousAdmin, nil
	}
	if token == "" {
		return Principal{}, ErrNoToken
	}
	digest := sha256.Sum256([]byte(token))
	found := -1
	// Every digest is compared, so the time taken says nothing about which
	// one matched, or how much of one.
	for i := range a.entries {
		if subtle.ConstantTimeCompare(digest[:], a.entries[i].digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Principal{}, ErrBadToken
	}
	return a.entries[found].principal, nil
}

// AuthenticateFrom is Authenticate for a caller at a network address (the
// HTTP client's IP). A wrong token spends one token of the address's
// failure bucket; while the bucket is empty every request from there is a
// *ThrottledError, whatever token it carries, so tokens cannot be
// guessed faster than FailureRate. A missing token is not counted: it
// guesses nothing.
func (a *Authenticator) AuthenticateFrom(addr, token string) (Principal, error) {
	if a.Open() {
		return a.Authenticate(token)
	}
	client := clientKey(addr)
	now := a.now()
	if wait, ok := a.failures.blocked(client, now); ok {
		return Principal{}, &ThrottledError{Client: client, RetryAfter: wait}
	}
	p, err := a.Authenticate(token)
	if errors.Is(err, ErrBadToken) {
		a.failures.fail(client, now)
	}
	return p, err
}

// Lookup returns the principal of the token named name as the
// configuration now has it (its role, scope and bodies), or false when no
// token has that name. The web console keeps only a token's name in a
// session and looks it up on every request, so a token removed from the
// configuration ends its sessions. With no token configured the only name
// is AnonymousName.
func (a *Authenticator) Lookup(name string) (Principal, bool) {
	if a.Open() {
		if name == AnonymousName {
			return anonymousAdmin, true
		}
		return Principal{}, false
	}
	for i := range a.entries {
		if a.entries[i].principal.Name == name {
			return a.entries[i].principal, true
		}
	}
	return Principal{}, false
}

// TokenDigest is the SHA-256 of the secret of the token named name, which
// binds a console session to the token it signed in with: a new secret
// under the same name (a rotation) ends the sessions of the old one. In
// open mode the anonymous principal's is all zeros.
func (a *Authenticator) TokenDigest(name string) ([sha256.Size]byte, bool) {
	if a.Open() {
		return [sha256.Size]byte{}, name == AnonymousName
	}
	for i := range a.entries {
		if a.entries[i].principal.Name == name {
			return a.entries[i].digest, true
		}
	}
	return [sha256.Size]byte{}, false
}

// Principals lists the principal of every configured token, in the
// configuration's order (the admin token first); with no token configured,
// the anonymous admin alone. The operations layer asks it who could
// approve a request.
func (a *Authenticator) Principals() []Principal {
	if a.Open() {
		return []Principal{anonymousAdmin}
	}
	out := make([]Principal, len(a.entries))
	for i := range a.entries {
		out[i] = a.entries[i].principal
	}
	return out
}

// Allow takes one request from p's rate limit and reports whether it may
// proceed.
func (a *Authenticator) Allow(p Principal) bool {
	for i := range a.entries {
		if a.entries[i].principal.Name == p.Name {
			return a.entries[i].limiter.Allow()
		}
	}
	return a.anonymous.Allow()
}

// Digest returns the hex SHA-256 of a token, the form token_sha256 takes.
func Digest(token string) string {
	d := sha256.Sum256([]byte(token))
	return hex.EncodeToString(d[:])
}
