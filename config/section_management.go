package config

import (
	"fmt"
	"net/url"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/redact"
)

// Management points dlq at RabbitMQ's management HTTP API, which it uses
// to check that no policy or operator policy makes RabbitMQ drop or expire
// messages in dlq's own queues before dlq stored them (docs/ARCHITECTURE.md,
// "Topology"). Off when URL is empty.
//
//	management:
//	  url: http://guest:guest@127.0.0.1:15672/   # DLQ_MANAGEMENT_URL
//	  interval: 1m                              # DLQ_MANAGEMENT_INTERVAL
type Management struct {
	// URL of the management API. Optional; empty turns the check off. Its
	// user and password are used when it has them, else those of the AMQP
	// URL. Env DLQ_MANAGEMENT_URL.
	URL string `yaml:"url"`
	// Interval is the time between checks after the one at start. Env
	// DLQ_MANAGEMENT_INTERVAL.
	Interval Duration `yaml:"interval"`
}

// Management defaults and bounds.
const (
	ManagementIntervalDefault = time.Minute
	ManagementIntervalMin     = time.Second
	ManagementIntervalMax     = 24 * time.Hour
)

func defaultManagement() Management {
	return Management{Interval: Duration(ManagementIntervalDefault)}
}

// managementEnvVars lists the environment variables of the management section.
func managementEnvVars() []envVar {
	return []envVar{
		{"DLQ_MANAGEMENT_URL", strVar(func(c *Config) *string { return &c.Management.URL })},
		{"DLQ_MANAGEMENT_INTERVAL", durVar("DLQ_MANAGEMENT_INTERVAL", func(c *Config) *Duration { return &c.Management.Interval })},
	}
}

// validateManagement checks the management section.
func (c *Config) validateManagement() []error {
	var errs []error
	m := c.Management
	if m.URL != "" {
		u, err := url.Parse(m.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("config: management.url / DLQ_MANAGEMENT_URL %q must be an http:// or https:// URL of RabbitMQ's management API (e.g. http://guest:guest@127.0.0.1:15672/), or empty to turn the policy check off",
				redact.URL(m.URL)))
		}
	}
	if d := m.Interval.D(); d < ManagementIntervalMin || d > ManagementIntervalMax {
		errs = append(errs, fmt.Errorf("config: management.interval / DLQ_MANAGEMENT_INTERVAL %s must be between %s and %s", d, ManagementIntervalMin, ManagementIntervalMax))
	}
	return errs
}

// ManagementCredentials returns the management API's URL without its
// user information, and the user and password to send: the URL's own, or
// else the AMQP URL's. vhost is the AMQP URL's virtual host, where dlq's
// queues live. With several AMQP URLs (a cluster), the first one's: the
// nodes of one cluster share users and virtual hosts.
func (c *Config) ManagementCredentials() (base, user, password, vhost string) {
	vhost = "/"
	if a, err := amqp.ParseURI(broker.SplitURLs(c.AMQPURL)[0]); err == nil {
		user, password, vhost = a.Username, a.Password, a.Vhost
	}
	u, err := url.Parse(c.Management.URL)
	if err != nil {
		return c.Management.URL, user, password, vhost
	}
	if u.User != nil {
		user = u.User.Username()
		password, _ = u.User.Password()
		u.User = nil
	}
	return u.String(), user, password, vhost
}
