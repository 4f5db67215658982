package consumer

import (
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/category"
	"github.com/dlq/dlq/store"
)

// Categorize sets m's failure category from rules (nil: unknown), over the
// death reason, the source queue and the failure details Convert read, and
// the delivery's headers as amqp091-go decoded them, which the rules read
// only when one of them names a header. It runs for every message the
// consumer stores.
func Categorize(rules *category.Rules, m *store.NewMessage, headers amqp.Table) {
	categorize(rules, m, len(headers) > 0, func(name string) (any, bool) {
		v, ok := headers[name]
		return v, ok
	})
}

// categorizeDelivery is Categorize for a delivery convert read, whose
// table may have come as bytes (rt; the return counts stay in d.Headers).
func categorizeDelivery(rules *category.Rules, m *store.NewMessage, d *amqp.Delivery, rt *broker.RawTable) {
	if rt == nil {
		Categorize(rules, m, d.Headers)
		return
	}
	headers := d.Headers // not d: the closure would take it to the heap
	categorize(rules, m, true, func(name string) (any, bool) {
		if broker.IsReturnCount(name) {
			v, ok := headers[name]
			return v, ok
		}
		v, ok := rt.Get(name)
		if !ok {
			return nil, false
		}
		return v.Decode(), true
	})
}

func categorize(rules *category.Rules, m *store.NewMessage, hasHeaders bool, header func(string) (any, bool)) {
	f := category.Fields{SourceQueue: m.SourceQueue, Reason: m.Reason, FailureType: m.FailureType, FailureMessage: m.FailureMessage}
	if rules.NeedsHeaders() && hasHeaders {
		f.Header = func(name string) (string, bool) {
			v, ok := header(name)
			if !ok {
				return "", false
			}
			return category.HeaderText(v)
		}
	}
	m.Category = rules.Of(f)
}
