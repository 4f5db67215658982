package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/dlq/dlq/auth"
)

// API configures the HTTP API and its tokens.
//
//	api:
//	  tokens:
//	    - name: ops
//	      token_sha256: 5e88…   # sha256sum of the secret; or token: the secret
//	      role: operator         # viewer | operator | admin
//	      queues: [orders]       # optional scope
//	      bodies: false          # viewers only: may see bodies
//	  rate_per_second: 50
//	  rate_burst: 100
//	  auth_failure_rate: 0.1   # wrong tokens per second per client address
//	  auth_failure_burst: 10
//	  max_body_bytes: 1048576
//	  confirm_above: 1000
//	  approval_above: 0        # 0: off; above it a bulk action waits for a second principal
//	  approval_ttl: 24h
type API struct {
	// Tokens besides DLQ_ADMIN_TOKEN.
	Tokens []auth.Token `yaml:"tokens"`
	// RatePerSecond is each token's sustained request rate; a negative
	// value disables the limit. Env DLQ_API_RATE.
	RatePerSecond float64 `yaml:"rate_per_second"`
	// RateBurst is each token's burst. Env DLQ_API_BURST.
	RateBurst int `yaml:"rate_burst"`
	// AuthFailureRate is how many failed authentications (wrong tokens)
	// per second one client address may sustain; past its burst the
	// address gets 429 whatever it sends until the bucket refills. A
	// negative value disables the throttle. Env DLQ_API_AUTH_FAILURE_RATE.
	AuthFailureRate float64 `yaml:"auth_failure_rate"`
	// AuthFailureBurst is how many wrong tokens a client address may send
	// at once. Env DLQ_API_AUTH_FAILURE_BURST.
	AuthFailureBurst int `yaml:"auth_failure_burst"`
	// MaxBodyBytes bounds a request body (413 above). Env DLQ_API_MAX_BODY_BYTES.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// ConfirmAbove is the largest acknowledge or delete by filter that runs
	// without confirm: true. Env DLQ_API_CONFIRM_ABOVE.
	ConfirmAbove int64 `yaml:"confirm_above"`
	// ApprovalAbove is the largest bulk replay, acknowledge or delete that
	// runs without a second principal's approval; above it the request
	// waits for one. 0 turns approval off. Env DLQ_APPROVAL_ABOVE.
	ApprovalAbove int64 `yaml:"approval_above"`
	// ApprovalTTL is how long a request waits for approval before it
	// expires. Env DLQ_APPROVAL_TTL.
	ApprovalTTL Duration `yaml:"approval_ttl"`
}

// API defaults.
const (
	APIRateDefault         = 50
	APIBurstDefault        = 100
	APIAuthFailureRate     = auth.FailureRateDefault
	APIAuthFailureBurst    = auth.FailureBurstDefault
	APIMaxBodyBytesDefault = 1 << 20
	APIConfirmAboveDefault = 1000
	APIApprovalTTLDefault  = Duration(24 * time.Hour)
)

func defaultAPI() API {
	return API{
		RatePerSecond:    APIRateDefault,
		RateBurst:        APIBurstDefault,
		AuthFailureRate:  APIAuthFailureRate,
		AuthFailureBurst: APIAuthFailureBurst,
		MaxBodyBytes:     APIMaxBodyBytesDefault,
		ConfirmAbove:     APIConfirmAboveDefault,
		ApprovalTTL:      APIApprovalTTLDefault,
	}
}

// apiEnvVars lists the environment variables of the api section.
func apiEnvVars() []envVar {
	return []envVar{
		{"DLQ_API_RATE", func(c *Config, v string) error {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return fmt.Errorf("config: DLQ_API_RATE=%q is not a number", v)
			}
			c.API.RatePerSecond = f
			return nil
		}},
		{"DLQ_API_BURST", intVar("DLQ_API_BURST", func(c *Config) *int { return &c.API.RateBurst })},
		{"DLQ_API_AUTH_FAILURE_RATE", func(c *Config, v string) error {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return fmt.Errorf("config: DLQ_API_AUTH_FAILURE_RATE=%q is not a number", v)
			}
			c.API.AuthFailureRate = f
			return nil
		}},
		{"DLQ_API_AUTH_FAILURE_BURST", intVar("DLQ_API_AUTH_FAILURE_BURST", func(c *Config) *int { return &c.API.AuthFailureBurst })},
		{"DLQ_API_MAX_BODY_BYTES", int64Var("DLQ_API_MAX_BODY_BYTES", func(c *Config) *int64 { return &c.API.MaxBodyBytes })},
		{"DLQ_API_CONFIRM_ABOVE", int64Var("DLQ_API_CONFIRM_ABOVE", func(c *Config) *int64 { return &c.API.ConfirmAbove })},
		{"DLQ_APPROVAL_ABOVE", int64Var("DLQ_APPROVAL_ABOVE", func(c *Config) *int64 { return &c.API.ApprovalAbove })},
		{"DLQ_APPROVAL_TTL", durVar("DLQ_APPROVAL_TTL", func(c *Config) *Duration { return &c.API.ApprovalTTL })},
	}
}

func int64Var(name string, dst func(*Config) *int64) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return fmt.Errorf("config: %s=%q is not a whole number", name, v)
		}
		*dst(c) = n
		return nil
	}
}

// AuthConfig is the configuration of the authenticator shared by the HTTP
// API and the control queue.
func (c *Config) AuthConfig() auth.Config {
	return auth.Config{
		AdminToken: c.AdminToken, Tokens: c.API.Tokens, RatePerSecond: c.API.RatePerSecond, Burst: c.API.RateBurst,
		FailureRate: c.API.AuthFailureRate, FailureBurst: c.API.AuthFailureBurst,
	}
}

// validateAPI checks the api section.
func (c *Config) validateAPI() []error {
	var errs []error
	a := c.API
	if a.RatePerSecond == 0 || math.IsNaN(a.RatePerSecond) || math.IsInf(a.RatePerSecond, 0) {
		errs = append(errs, fmt.Errorf("config: api.rate_per_second / DLQ_API_RATE %v must be a positive number of requests per second per client address (negative disables the limit)", a.RatePerSecond))
	}
	if a.RatePerSecond > 0 && a.RateBurst < 1 {
		errs = append(errs, fmt.Errorf("config: api.rate_burst / DLQ_API_BURST %d must be >= 1", a.RateBurst))
	}
	if a.AuthFailureRate == 0 || math.IsNaN(a.AuthFailureRate) || math.IsInf(a.AuthFailureRate, 0) {
		errs = append(errs, fmt.Errorf("config: api.auth_failure_rate / DLQ_API_AUTH_FAILURE_RATE %v must be a positive number of failed authentications per second per client address (negative disables the throttle)", a.AuthFailureRate))
	}
	if a.AuthFailureRate > 0 && a.AuthFailureBurst < 1 {
		errs = append(errs, fmt.Errorf("config: api.auth_failure_burst / DLQ_API_AUTH_FAILURE_BURST %d must be >= 1", a.AuthFailureBurst))
	}
	if a.MaxBodyBytes < 1024 {
		errs = append(errs, fmt.Errorf("config: api.max_body_bytes / DLQ_API_MAX_BODY_BYTES %d must be >= 1024", a.MaxBodyBytes))
	}
	if a.ConfirmAbove < 0 {
		errs = append(errs, fmt.Errorf("config: api.confirm_above / DLQ_API_CONFIRM_ABOVE %d must be >= 0 (0: never ask)", a.ConfirmAbove))
	}
	if a.ApprovalAbove < 0 {
		errs = append(errs, fmt.Errorf("config: api.approval_above / DLQ_APPROVAL_ABOVE %d must be >= 0 (0: no approval)", a.ApprovalAbove))
	}
	if a.ApprovalTTL < Duration(time.Minute) {
		errs = append(errs, fmt.Errorf("config: api.approval_ttl / DLQ_APPROVAL_TTL %s must be at least 1m", a.ApprovalTTL.D()))
	}
	if _, err := auth.New(c.AuthConfig()); err != nil {
		errs = append(errs, fmt.Errorf("config: api.tokens: %w", err))
	}
	return errs
}
