package consumer

import (
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/category"
	"github.com/dlq/dlq/store"
)

// Categorize sets m's failure category from rules (nil: unknown), over the
// death reason, the source queue and the failure details Convert read, and
// the delivery's headers as amqp091-go decoded them, which the rules read
// only when one of them names a header. It runs for every message the
// consumer stores.
func Categorize(rules *category.Rules, m *store.NewMessage, headers amqp.Table) {
	f := category.Fields{SourceQueue: m.SourceQueue, Reason: m.Reason, FailureType: m.FailureType, FailureMessage: m.FailureMessage}
	if rules.NeedsHeaders() && len(headers) > 0 {
		f.Header = func(name string) (string, bool) {
			v, ok := headers[name]
			if !ok {
				return "", false
			}
			return category.HeaderText(v)
		}
	}
	m.Category = rules.Of(f)
}
