package config

import (
	"fmt"
	"time"
)

// UI configures the web console served under /ui/ on the HTTP address
// (docs/CONSOLE.md).
//
//	ui:
//	  enabled: true       # DLQ_UI
//	  session_ttl: 12h    # DLQ_UI_SESSION_TTL
type UI struct {
	// Enabled serves the console. Env DLQ_UI.
	Enabled bool `yaml:"enabled"`
	// SessionTTL is how long a sign-in lasts. Env DLQ_UI_SESSION_TTL.
	SessionTTL Duration `yaml:"session_ttl"`
}

// UI defaults and bounds.
const (
	UISessionTTLDefault = 12 * time.Hour
	UISessionTTLMin     = time.Minute
	UISessionTTLMax     = 30 * 24 * time.Hour
)

func defaultUI() UI {
	return UI{Enabled: true, SessionTTL: Duration(UISessionTTLDefault)}
}

// uiEnvVars lists the environment variables of the ui section.
func uiEnvVars() []envVar {
	return []envVar{
		{"DLQ_UI", replayBoolVar("ui.enabled", "DLQ_UI", func(c *Config) *bool { return &c.UI.Enabled })},
		{"DLQ_UI_SESSION_TTL", durVar("DLQ_UI_SESSION_TTL", func(c *Config) *Duration { return &c.UI.SessionTTL })},
	}
}

// validateUI checks the ui section.
func (c *Config) validateUI() []error {
	if d := c.UI.SessionTTL.D(); d < UISessionTTLMin || d > UISessionTTLMax {
		return []error{fmt.Errorf("config: ui.session_ttl / DLQ_UI_SESSION_TTL %s must be between %s and %s", d, UISessionTTLMin, UISessionTTLMax)}
	}
	return nil
}
