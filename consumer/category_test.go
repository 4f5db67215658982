package consumer_test

import (
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/category"
	"github.com/dlq/dlq/consumer"
)

// failure is one way an application failed, as an exception type and
// message of its language.
type failure struct{ typ, msg string }

// convention writes a failure into the headers one framework uses
// (the four conventions broker.ExtractFailure reads).
type convention struct {
	name    string
	headers func(f failure) amqp.Table
}

var conventions = []convention{
	{"nservicebus", func(f failure) amqp.Table {
		return amqp.Table{
			"NServiceBus.ExceptionInfo.ExceptionType": f.typ,
			"NServiceBus.ExceptionInfo.Message":       f.msg,
			"NServiceBus.ExceptionInfo.StackTrace":    f.typ + ": " + f.msg + "\n   at Orders.PlaceOrderHandler.Handle(PlaceOrder message, IMessageHandlerContext context)",
			"NServiceBus.FailedQ":                     "orders",
			"NServiceBus.TimeOfFailure":               "2026-11-25 10:15:42:123456 Z",
			"NServiceBus.ProcessingEndpoint":          "Orders",
			"NServiceBus.EnclosedMessageTypes":        "Acme.Orders.PlaceOrder, Acme.Orders",
		}
	}},
	{"masstransit", func(f failure) amqp.Table {
		return amqp.Table{
			"MT-Fault-ExceptionType": f.typ,
			"MT-Fault-Message":       f.msg,
			"MT-Fault-StackTrace":    "   at Acme.Orders.PlaceOrderConsumer.Consume(ConsumeContext`1 context)",
			"MT-Fault-Timestamp":     "2026-11-25T10:15:42.1234567Z",
			"MT-Reason":              "fault",
			"MT-Fault-ConsumerType":  "Acme.Orders.PlaceOrderConsumer",
			"MT-Fault-RetryCount":    int32(3),
			"MT-Host-MachineName":    "orders-7d9f",
		}
	}},
	{"spring", func(f failure) amqp.Table {
		return amqp.Table{
			"x-exception-message":    f.msg,
			"x-exception-stacktrace": f.typ + ": " + f.msg + "\n\tat com.acme.orders.OrderListener.onMessage(OrderListener.java:42)\n",
			"x-original-exchange":    "orders",
			"x-original-routingKey":  "orders.placed",
		}
	}},
	{"celery", func(f failure) amqp.Table {
		// Celery writes the task, not the error: the application adds the
		// exception in headers of its own when it rejects.
		return amqp.Table{
			"task": "orders.tasks.place_order", "id": "6f1c2b9e-0c55-4b8f-a1d4-2f7e0e1a9c3b", "lang": "py",
			"retries": int64(3), "argsrepr": "(42,)", "kwargsrepr": "{}",
			"x-exception-type": f.typ, "x-error-message": f.msg,
		}
	}},
}

// examples are realistic failures of each default rule, one per
// convention (.NET for NServiceBus and MassTransit, Java for Spring,
// Python for Celery).
var examples = map[string][4]failure{
	"timeout": {
		{"System.TimeoutException", "The operation has timed out."},
		{"System.Threading.Tasks.TaskCanceledException", "The request was canceled due to the configured HttpClient.Timeout of 100 seconds elapsing."},
		{"java.net.SocketTimeoutException", "Read timed out"},
		{"requests.exceptions.ReadTimeout", "HTTPConnectionPool(host='inventory', port=80): Read timed out. (read timeout=5)"},
	},
	"connection": {
		{"System.Net.Http.HttpRequestException", "Connection refused (inventory:80)"},
		{"RabbitMQ.Client.Exceptions.BrokerUnreachableException", "None of the specified endpoints were reachable"},
		{"org.springframework.web.client.ResourceAccessException", `I/O error on POST request for "http://inventory/reserve": Connection refused`},
		{"ConnectionResetError", "[Errno 104] Connection reset by peer"},
	},
	"throttled_or_unavailable": {
		{"System.Net.Http.HttpRequestException", "Response status code does not indicate success: 503 (Service Unavailable)."},
		{"Polly.RateLimit.RateLimitRejectedException", "The operation could not be executed because it was rejected by the rate limit."},
		{"org.springframework.web.client.HttpServerErrorException$ServiceUnavailable", "503 Service Unavailable: [no body]"},
		{"requests.exceptions.HTTPError", "429 Client Error: Too Many Requests for url: https://payments.example/charge"},
	},
	"deadlock": {
		{"Microsoft.Data.SqlClient.SqlException", "Transaction (Process ID 57) was deadlocked on lock resources with another process and has been chosen as the deadlock victim. Rerun the transaction."},
		{"Npgsql.PostgresException", "40P01: deadlock detected"},
		{"org.springframework.dao.CannotAcquireLockException", "Deadlock found when trying to get lock; try restarting transaction"},
		{"psycopg2.errors.SerializationFailure", "could not serialize access due to concurrent update"},
	},
	"deserialization": {
		{"NServiceBus.MessageDeserializationException", "An error occurred while attempting to extract logical messages from incoming physical message 9f2c6a1e"},
		{"System.Text.Json.JsonException", "'<' is an invalid start of a value. Path: $ | LineNumber: 0 | BytePositionInLine: 0."},
		{"org.springframework.amqp.support.converter.MessageConversionException", "Failed to convert Message content"},
		{"json.decoder.JSONDecodeError", "Expecting value: line 1 column 1 (char 0)"},
	},
	"validation": {
		{"FluentValidation.ValidationException", "Validation failed: -- Quantity: 'Quantity' must be greater than '0'."},
		{"System.ArgumentException", "Value does not fall within the expected range."},
		{"jakarta.validation.ConstraintViolationException", "placeOrder.arg0.total: must be greater than 0"},
		{"ValueError", "invalid literal for int() with base 10: 'abc'"},
	},
	"null_reference": {
		{"System.NullReferenceException", "Object reference not set to an instance of an object."},
		{"System.NullReferenceException", "Object reference not set to an instance of an object. at Acme.Orders.PlaceOrderConsumer.Consume"},
		{"java.lang.NullPointerException", `Cannot invoke "com.acme.Order.getTotal()" because "order" is null`},
		{"AttributeError", "'NoneType' object has no attribute 'items'"},
	},
	"schema": {
		{"Acme.Contracts.SchemaMismatchException", "Message version 3 does not match the consumer's version 2"},
		{"System.InvalidOperationException", "Unknown field 'discountCode' in OrderPlaced"},
		{"com.fasterxml.jackson.databind.exc.UnrecognizedPropertyException", `Unrecognized field "discount" (class com.acme.Order), not marked as ignorable`},
		{"fastavro.read.SchemaResolutionError", "Reader's field 'sku' has no default and is missing from the writer's record"},
	},
}

func deadLetter(reason string, h amqp.Table) amqp.Delivery {
	now := time.Now().Truncate(time.Second)
	h["x-death"] = []any{amqp.Table{"count": int64(1), "reason": reason, "queue": "orders", "time": now,
		"exchange": "orders", "routing-keys": []any{"orders.placed"}}}
	h["x-first-death-reason"], h["x-first-death-queue"] = reason, "orders"
	return amqp.Delivery{Exchange: "dlx", RoutingKey: "orders.placed", ContentType: "application/json", Headers: h, Body: []byte(`{"order":42}`)}
}

// TestDefaultRulesOnFrameworkHeaders: each default rule categorises a
// realistic failure written by each of the four framework conventions,
// through the consumer's own conversion.
func TestDefaultRulesOnFrameworkHeaders(t *testing.T) {
	t.Parallel()
	rules, err := category.New(nil, true)
	require.NoError(t, err)
	for _, r := range category.DefaultRules() {
		if len(r.Reasons) > 0 {
			continue // the reason rules, below
		}
		ex, ok := examples[r.Name]
		require.True(t, ok, "default rule %s has no examples", r.Name)
		for i, conv := range conventions {
			d := deadLetter("rejected", conv.headers(ex[i]))
			m := consumer.Convert(&d, "dlq", time.Now())
			require.NotEmpty(t, m.Failure, "%s: %s", r.Name, conv.name)
			require.Contains(t, string(m.Failure), `"origin":"`+conv.name+`"`, "%s: %s", r.Name, conv.name)
			consumer.Categorize(rules, &m, d.Headers)
			got, rule := rules.Match(category.Fields{SourceQueue: m.SourceQueue, Reason: m.Reason, FailureType: m.FailureType, FailureMessage: m.FailureMessage})
			require.Equal(t, r.Name, rule, "%s via %s", ex[i], conv.name)
			require.Equal(t, r.Category, got)
			require.Equal(t, r.Category, m.Category, "%s via %s", ex[i], conv.name)
		}
	}
	for _, reason := range []string{"expired", "maxlen"} {
		d := deadLetter(reason, amqp.Table{})
		m := consumer.Convert(&d, "dlq", time.Now())
		consumer.Categorize(rules, &m, d.Headers)
		require.Equal(t, category.Transient, m.Category, reason)
	}
	for _, reason := range []string{"rejected", "delivery_limit"} {
		d := deadLetter(reason, amqp.Table{"tenant": "acme"})
		m := consumer.Convert(&d, "dlq", time.Now())
		consumer.Categorize(rules, &m, d.Headers)
		require.Equal(t, category.Unknown, m.Category, "no failure details: %s", reason)
	}
	// Without rules, nothing is categorised.
	d := deadLetter("expired", amqp.Table{})
	m := consumer.Convert(&d, "dlq", time.Now())
	consumer.Categorize(nil, &m, d.Headers)
	require.Equal(t, category.Unknown, m.Category)
}

// TestCustomRulesOnHeaders: a rule on a header sees the value the
// application sent, whatever its AMQP type, at ingest and again from the
// stored JSON (as the categories job reads it).
func TestCustomRulesOnHeaders(t *testing.T) {
	t.Parallel()
	rules, err := category.New([]category.Rule{
		{Name: "http-5xx", Category: category.Transient, Headers: map[string]string{"x-http-status": `^5\d\d$`}},
		{Name: "http-4xx", Category: category.Permanent, Headers: map[string]string{"x-http-status": `^4\d\d$`}},
		{Name: "poison", Category: category.Permanent, Headers: map[string]string{"x-poison": `^true$`}, Queues: []string{"orders"}},
		{Name: "tenant-bytes", Category: category.Transient, Headers: map[string]string{"x-tenant": `^maint`}},
	}, true)
	require.NoError(t, err)
	for i, c := range []struct {
		h    amqp.Table
		want string
	}{
		{amqp.Table{"x-http-status": int32(503)}, category.Transient},
		{amqp.Table{"x-http-status": int16(404)}, category.Permanent},
		{amqp.Table{"x-http-status": "422"}, category.Permanent},
		{amqp.Table{"x-http-status": float64(503)}, category.Unknown}, // floats are not text
		{amqp.Table{"x-poison": true}, category.Permanent},
		{amqp.Table{"x-tenant": []byte("maintenance")}, category.Transient},
		// A header rule wins over the defaults only by coming first.
		{amqp.Table{"x-http-status": int64(400), "x-exception-type": "System.TimeoutException"}, category.Permanent},
	} {
		d := deadLetter("rejected", c.h)
		m := consumer.Convert(&d, "dlq", time.Now())
		consumer.Categorize(rules, &m, d.Headers)
		require.Equal(t, c.want, m.Category, "case %d", i)
		stored := rules.Of(category.Fields{SourceQueue: m.SourceQueue, Reason: m.Reason, FailureType: m.FailureType,
			FailureMessage: m.FailureMessage, Header: category.HeadersJSON(m.Headers)})
		require.Equal(t, m.Category, stored, "case %d: the stored headers categorise alike", i)
	}
}

func BenchmarkConvertAndCategorize(b *testing.B) {
	rules, err := category.New(nil, true)
	require.NoError(b, err)
	var ds []amqp.Delivery
	for _, ex := range examples {
		for i, conv := range conventions {
			ds = append(ds, deadLetter("rejected", conv.headers(ex[i])))
		}
	}
	for _, categorize := range []bool{false, true} {
		b.Run(fmt.Sprintf("categorize=%v", categorize), func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				d := &ds[i%len(ds)]
				m := consumer.Convert(d, "dlq", time.Now())
				if categorize {
					consumer.Categorize(rules, &m, d.Headers)
				}
			}
		})
	}
}
