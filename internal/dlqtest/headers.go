package dlqtest

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// InUTC is v (a header value, a table or an array of them) with every
// time in it in UTC: AMQP carries seconds since the epoch, and the client
// reads them in the local zone, so a header that went through RabbitMQ
// compares equal to the one sent only once both are in UTC.
func InUTC(v any) any {
	switch x := v.(type) {
	case time.Time:
		return x.UTC()
	case amqp.Table:
		out := amqp.Table{}
		for k, e := range x {
			out[k] = InUTC(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = InUTC(e)
		}
		return out
	}
	return v
}
