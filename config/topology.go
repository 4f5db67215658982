package config

import (
	"fmt"

	"github.com/dlq/dlq/broker"
)

// Topology lists the source queues `dlq topology` (and serve) declares with
// their dead-letter arguments. dlq's own exchange and queues come from the
// top-level settings.
type Topology struct {
	// SourceQueues are application queues to declare. Optional.
	SourceQueues []broker.SourceQueue `yaml:"source_queues"`
	// DeclareSources makes `dlq serve` declare SourceQueues at start too,
	// not only `dlq topology`. Optional; default false.
	DeclareSources bool `yaml:"declare_sources"`
}

// BrokerTopology is the broker's view of the configured topology.
func (c *Config) BrokerTopology() broker.Topology {
	return broker.Topology{
		Exchange:     c.Exchange,
		Queues:       c.Queues,
		ControlQueue: c.ControlQueue,
		Sources:      c.Topology.SourceQueues,
	}
}

func (t Topology) validate(c *Config) []error {
	if err := c.BrokerTopology().Validate(); err != nil {
		return []error{fmt.Errorf("config: topology.source_queues: %w", err)}
	}
	return nil
}
