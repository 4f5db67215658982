package consumer

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/category"
	"github.com/dlq/dlq/store"
)

// Returns is returns, for the tests of the return counts.
var Returns = returns

// ConvertBoth converts d as the amqp.Table path does (d.Headers holding
// what amqp091-go decoded from table) and as the raw path does (the same
// delivery carrying table as bytes), categorized by rules both ways.
func ConvertBoth(d amqp.Delivery, table []byte, queue string, now time.Time, rules *category.Rules) (viaTable, viaRaw store.NewMessage) {
	viaTable, _ = convert(&d, queue, now, nil)
	Categorize(rules, &viaTable, d.Headers)
	d.Headers = nil
	viaRaw, rt := convertRaw(&d, queue, now, table)
	categorizeDelivery(rules, &viaRaw, &d, rt)
	return viaTable, viaRaw
}

// ConvertRaw is the raw path alone, for its benchmark.
func ConvertRaw(d *amqp.Delivery, table []byte, queue string, now time.Time) store.NewMessage {
	m, _ := convertRaw(d, queue, now, table)
	return m
}
