package broker

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

func timePtr(s string) *time.Time {
	t := utc(s)
	return &t
}

func timePtrNano(s string) *time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	t = t.UTC()
	return &t
}

// What Spring AMQP's RepublishMessageRecoverer sends after a @RabbitListener
// threw: the listener's exception wrapped in ListenerExecutionFailedException,
// the cause's message in x-exception-message.
const springStack = "org.springframework.amqp.rabbit.support.ListenerExecutionFailedException: Listener method 'public void com.example.orders.OrderListener.onOrder(com.example.orders.Order)' threw exception\n" +
	"\tat org.springframework.amqp.rabbit.listener.AbstractMessageListenerContainer.wrapToListenerExecutionFailedExceptionIfNeeded(AbstractMessageListenerContainer.java:1780)\n" +
	"\tat org.springframework.amqp.rabbit.listener.AbstractMessageListenerContainer.doInvokeListener(AbstractMessageListenerContainer.java:1670)\n" +
	"Caused by: java.lang.IllegalStateException: order 42 has no customer\n" +
	"\tat com.example.orders.OrderListener.onOrder(OrderListener.java:31)\n" +
	"\t... 14 more\n" +
	"Caused by: java.sql.SQLException: connection reset\n"

func springHeaders() amqp.Table {
	return amqp.Table{
		"x-exception-stacktrace": springStack,
		"x-exception-message":    "order 42 has no customer",
		"x-original-exchange":    "orders",
		"x-original-routingKey":  "order.created",
		"__TypeId__":             "com.example.orders.Order",
		"contentType":            "application/json",
	}
}

// MassTransit's error transport headers (RabbitMQ transport: numbers are
// int32, the fault timestamp is a .NET "O" string).
func massTransitHeaders() amqp.Table {
	return amqp.Table{
		"Content-Type":                   "application/vnd.masstransit+json",
		"MT-Reason":                      "fault",
		"MT-Fault-ExceptionType":         "System.InvalidOperationException",
		"MT-Fault-Message":               "Order 42 could not be reserved",
		"MT-Fault-Timestamp":             "2024-03-05T14:07:09.1234567Z",
		"MT-Fault-StackTrace":            "   at Orders.ReserveConsumer.Consume(ConsumeContext`1 context) in /src/Orders/ReserveConsumer.cs:line 27\n   at MassTransit.DependencyInjection.ScopeConsumerFactory`1.Send[TMessage](ConsumeContext`1 context, IPipe`1 next)",
		"MT-Fault-ConsumerType":          "Orders.ReserveConsumer",
		"MT-Fault-MessageType":           "Orders.Contracts.ReserveOrder",
		"MT-Fault-InputAddress":          "rabbitmq://localhost/reserve-order",
		"MT-Fault-RetryCount":            int32(3),
		"MT-Host-MachineName":            "orders-7d9f",
		"MT-Host-ProcessName":            "Orders.Service",
		"MT-Host-ProcessId":              int32(1),
		"MT-Host-Assembly":               "Orders.Service",
		"MT-Host-AssemblyVersion":        "1.4.0.0",
		"MT-Host-MassTransitVersion":     "8.1.3.0",
		"MT-Host-FrameworkVersion":       "8.0.2",
		"MT-Host-OperatingSystemVersion": "Unix 5.15.0.1053",
		"publishId":                      "1",
	}
}

// NServiceBus failed-message headers: every value is a string.
func nServiceBusHeaders() amqp.Table {
	return amqp.Table{
		"NServiceBus.MessageId":                        "9c0f3c2e-5b1e-4c55-9b1a-b10e00f3a1c2",
		"NServiceBus.MessageIntent":                    "Send",
		"NServiceBus.ConversationId":                   "1d8d2a0e-3a4b-4f21-8d54-b10e00f3a1c3",
		"NServiceBus.CorrelationId":                    "9c0f3c2e-5b1e-4c55-9b1a-b10e00f3a1c2",
		"NServiceBus.OriginatingMachine":               "web-1",
		"NServiceBus.OriginatingEndpoint":              "Sales.Web",
		"$.diagnostics.originating.hostid":             "6b2a5e4c1f0d9e8a7b6c5d4e3f2a1b0c",
		"NServiceBus.ContentType":                      "application/json",
		"NServiceBus.EnclosedMessageTypes":             "Sales.Messages.PlaceOrder, Sales.Messages, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null",
		"NServiceBus.Version":                          "8.1.6",
		"NServiceBus.TimeSent":                         "2024-03-05 14:07:08:456789 Z",
		"NServiceBus.ProcessingEndpoint":               "Sales",
		"NServiceBus.ProcessingMachine":                "sales-1",
		"NServiceBus.ExceptionInfo.ExceptionType":      "System.Exception",
		"NServiceBus.ExceptionInfo.InnerExceptionType": "System.TimeoutException",
		"NServiceBus.ExceptionInfo.HelpLink":           "",
		"NServiceBus.ExceptionInfo.Message":            "Payment gateway did not answer",
		"NServiceBus.ExceptionInfo.Source":             "Sales",
		"NServiceBus.ExceptionInfo.StackTrace":         "System.Exception: Payment gateway did not answer\n ---> System.TimeoutException: The operation has timed out.\n   at Sales.PlaceOrderHandler.Handle(PlaceOrder message, IMessageHandlerContext context) in /src/Sales/PlaceOrderHandler.cs:line 19",
		"NServiceBus.ExceptionInfo.Data.Message type":  "Sales.Messages.PlaceOrder",
		"NServiceBus.ExceptionInfo.Data.Handler type":  "Sales.PlaceOrderHandler",
		"NServiceBus.FailedQ":                          "Sales",
		"NServiceBus.TimeOfFailure":                    "2024-03-05 14:07:09:123456 Z",
	}
}

// Celery message protocol v2 headers as py-amqp sends them (ints as int32,
// None as void), for a task that exhausted its retries and was rejected.
func celeryHeaders() amqp.Table {
	return amqp.Table{
		"lang": "py", "task": "billing.tasks.charge_card", "id": "d2f5a3b4-8c1e-4f7a-9b0d-2e6c5a4b3f21",
		"shadow": nil, "eta": nil, "expires": nil, "group": nil, "group_index": nil,
		"retries": int32(3), "timelimit": []any{nil, nil},
		"root_id": "d2f5a3b4-8c1e-4f7a-9b0d-2e6c5a4b3f21", "parent_id": nil,
		"argsrepr": "(42,)", "kwargsrepr": "{'amount': Decimal('9.99')}",
		"origin": "gen4242@worker-1", "ignore_result": false,
		"replaced_task_nesting": int32(0), "stamped_headers": nil, "stamps": amqp.Table{},
	}
}

func merge(tables ...amqp.Table) amqp.Table {
	out := amqp.Table{}
	for _, t := range tables {
		for k, v := range t {
			out[k] = v
		}
	}
	return out
}

func TestExtractFailure(t *testing.T) {
	t.Parallel()
	celeryProps := Properties{CorrelationID: "d2f5a3b4-8c1e-4f7a-9b0d-2e6c5a4b3f21"}
	tests := []struct {
		name    string
		headers amqp.Table
		props   Properties
		want    Failure
	}{
		{
			name:    "nothing",
			headers: amqp.Table{"traceparent": "00-abc", "x-death": []any{}},
			want:    Failure{},
		},
		{
			name:    "nil headers",
			headers: nil,
			want:    Failure{},
		},
		{
			name:    "spring wrapped listener exception",
			headers: springHeaders(),
			want: Failure{
				Type:    "java.lang.IllegalStateException",
				Message: "order 42 has no customer",
				Stack:   springStack,
				Origin:  "spring",
				Extra:   map[string]string{"original_exchange": "orders", "original_routing_key": "order.created"},
			},
		},
		{
			name: "spring unwrapped exception, no message",
			headers: amqp.Table{
				"x-exception-stacktrace": "java.lang.NullPointerException\n\tat com.example.A.b(A.java:1)\n",
				"x-original-exchange":    "",
				"x-original-routingKey":  "jobs",
			},
			want: Failure{
				Type:   "java.lang.NullPointerException",
				Stack:  "java.lang.NullPointerException\n\tat com.example.A.b(A.java:1)\n",
				Origin: "spring",
				Extra:  map[string]string{"original_routing_key": "jobs"},
			},
		},
		{
			name: "spring cloud stream adds the class name",
			headers: amqp.Table{
				"x-exception-message":    "bad payload",
				"x-exception-stacktrace": springStack,
				"x-exception-fqcn":       "org.springframework.messaging.converter.MessageConversionException",
			},
			want: Failure{
				Type:    "org.springframework.messaging.converter.MessageConversionException",
				Message: "bad payload",
				Stack:   springStack,
				Origin:  "spring",
			},
		},
		{
			name:    "masstransit",
			headers: massTransitHeaders(),
			want: Failure{
				Type:    "System.InvalidOperationException",
				Message: "Order 42 could not be reserved",
				Stack:   massTransitHeaders()["MT-Fault-StackTrace"].(string),
				Origin:  "masstransit",
				Extra: map[string]string{
					"reason":                   "fault",
					"consumer_type":            "Orders.ReserveConsumer",
					"message_type":             "Orders.Contracts.ReserveOrder",
					"input_address":            "rabbitmq://localhost/reserve-order",
					"retry_count":              "3",
					"host_machine_name":        "orders-7d9f",
					"host_process_name":        "Orders.Service",
					"host_process_id":          "1",
					"host_assembly":            "Orders.Service",
					"host_assembly_version":    "1.4.0.0",
					"host_masstransit_version": "8.1.3.0",
				},
				At: timePtrNano("2024-03-05T14:07:09.1234567Z"),
			},
		},
		{
			name:    "nservicebus",
			headers: nServiceBusHeaders(),
			want: Failure{
				Type:    "System.Exception",
				Message: "Payment gateway did not answer",
				Stack:   nServiceBusHeaders()["NServiceBus.ExceptionInfo.StackTrace"].(string),
				Origin:  "nservicebus",
				Extra: map[string]string{
					"failed_queue":           "Sales",
					"inner_exception_type":   "System.TimeoutException",
					"source":                 "Sales",
					"processing_endpoint":    "Sales",
					"processing_machine":     "sales-1",
					"enclosed_message_types": "Sales.Messages.PlaceOrder, Sales.Messages, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null",
				},
				At: timePtrNano("2024-03-05T14:07:09.123456Z"),
			},
		},
		{
			name:    "celery",
			headers: celeryHeaders(),
			props:   celeryProps,
			want: Failure{
				Origin: "celery",
				Extra: map[string]string{
					"task":           "billing.tasks.charge_card",
					"id":             "d2f5a3b4-8c1e-4f7a-9b0d-2e6c5a4b3f21",
					"retries":        "3",
					"argsrepr":       "(42,)",
					"kwargsrepr":     "{'amount': Decimal('9.99')}",
					"root_id":        "d2f5a3b4-8c1e-4f7a-9b0d-2e6c5a4b3f21",
					"origin":         "gen4242@worker-1",
					"correlation_id": "d2f5a3b4-8c1e-4f7a-9b0d-2e6c5a4b3f21",
				},
			},
		},
		{
			name: "celery through a client that sends bytes and int64",
			headers: amqp.Table{
				"task": []byte("app.add"), "id": []byte("abc"), "retries": int64(0), "lang": []byte("py"),
				"argsrepr": []byte("(2, 2)"), "kwargsrepr": []byte("{}"),
			},
			want: Failure{
				Origin: "celery",
				Extra:  map[string]string{"task": "app.add", "id": "abc", "retries": "0", "argsrepr": "(2, 2)", "kwargsrepr": "{}"},
			},
		},
		{
			name:    "a lone task header is not celery",
			headers: amqp.Table{"task": "cleanup"},
			want:    Failure{},
		},
		{
			name:    "celery with the application's own error header",
			headers: merge(celeryHeaders(), amqp.Table{"x-error-message": "card declined", "x-error-type": "stripe.error.CardError"}),
			want: Failure{
				Type:    "stripe.error.CardError",
				Message: "card declined",
				Origin:  "celery",
				Extra: map[string]string{
					"task": "billing.tasks.charge_card", "id": "d2f5a3b4-8c1e-4f7a-9b0d-2e6c5a4b3f21", "retries": "3",
					"argsrepr": "(42,)", "kwargsrepr": "{'amount': Decimal('9.99')}",
					"root_id": "d2f5a3b4-8c1e-4f7a-9b0d-2e6c5a4b3f21", "origin": "gen4242@worker-1",
				},
			},
		},
		{
			name: "generic",
			headers: amqp.Table{
				"x-error-type": "ValidationError", "x-error": "amount must be positive",
				"x-error-stack": "Error: amount must be positive\n    at validate (/app/index.js:10:11)", "x-error-origin": "payments-api",
			},
			want: Failure{
				Type: "ValidationError", Message: "amount must be positive",
				Stack:  "Error: amount must be positive\n    at validate (/app/index.js:10:11)",
				Origin: "generic", Extra: map[string]string{"origin": "payments-api"},
			},
		},
		{
			name: "generic names in preference order",
			headers: amqp.Table{
				"x-exception-type": "A", "x-error-type": "B", "x-error-message": "m1", "x-error": "m2",
				"x-error-stack": "s1", "x-exception-stack": "s2",
			},
			want: Failure{Type: "A", Message: "m1", Stack: "s1", Origin: "generic"},
		},
		{
			name:    "blank generic values are skipped",
			headers: amqp.Table{"x-error-message": "  ", "x-error": "real"},
			want:    Failure{Message: "real", Origin: "generic"},
		},
		{
			name:    "x-error-origin alone is not a failure",
			headers: amqp.Table{"x-error-origin": "svc"},
			want:    Failure{},
		},
		{
			name:    "nservicebus beats masstransit, spring and generic",
			headers: merge(springHeaders(), massTransitHeaders(), amqp.Table{"x-error-message": "generic"}, nServiceBusHeaders()),
			want: Failure{
				Type:    "System.Exception",
				Message: "Payment gateway did not answer",
				Stack:   nServiceBusHeaders()["NServiceBus.ExceptionInfo.StackTrace"].(string),
				Origin:  "nservicebus",
				Extra: map[string]string{
					"failed_queue": "Sales", "inner_exception_type": "System.TimeoutException", "source": "Sales",
					"processing_endpoint": "Sales", "processing_machine": "sales-1",
					"enclosed_message_types": "Sales.Messages.PlaceOrder, Sales.Messages, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null",
				},
				At: timePtrNano("2024-03-05T14:07:09.123456Z"),
			},
		},
		{
			name:    "spring beats celery",
			headers: merge(celeryHeaders(), amqp.Table{"x-exception-message": "boom", "x-exception-stacktrace": "java.lang.RuntimeException: boom"}),
			want:    Failure{Type: "java.lang.RuntimeException", Message: "boom", Stack: "java.lang.RuntimeException: boom", Origin: "spring"},
		},
		{
			name: "case variants",
			headers: amqp.Table{
				"mt-fault-exceptiontype": "System.ArgumentException", "MT-FAULT-MESSAGE": "bad", "mt-reason": "fault",
			},
			want: Failure{Type: "System.ArgumentException", Message: "bad", Origin: "masstransit", Extra: map[string]string{"reason": "fault"}},
		},
		{
			name:    "exact spelling beats a case variant",
			headers: amqp.Table{"X-Error-Message": "variant", "x-error-message": "exact", "X-ERROR-MESSAGE": "variant too"},
			want:    Failure{Message: "exact", Origin: "generic"},
		},
		{
			name: "masstransit timestamp that does not parse is kept as text",
			headers: amqp.Table{
				"MT-Fault-ExceptionType": "System.Exception", "MT-Fault-Timestamp": "yesterday at noon",
			},
			want: Failure{Type: "System.Exception", Origin: "masstransit", Extra: map[string]string{"time_of_failure": "yesterday at noon"}},
		},
		{
			name: "masstransit timestamp as an AMQP timestamp",
			headers: amqp.Table{
				"MT-Fault-Message": "x", "MT-Fault-Timestamp": ts("2024-03-05T14:07:09Z"),
			},
			want: Failure{Message: "x", Origin: "masstransit", At: timePtr("2024-03-05T14:07:09Z")},
		},
		{
			name: "text that would break a text column is cleaned",
			headers: amqp.Table{
				"x-error-type": " Bad\x00Type ", "x-error-message": "caf\xe9", "x-error-stack": "line\x00two", "x-error-origin": "\xff",
			},
			want: Failure{
				Type: "Bad\uFFFDType", Message: "caf\uFFFD", Stack: "line\uFFFDtwo", Origin: "generic",
				Extra: map[string]string{"origin": "\uFFFD"},
			},
		},
		{
			name: "values of every type are stringified",
			headers: amqp.Table{
				"x-error-message": amqp.Decimal{Scale: 2, Value: -5}, "x-error-type": int16(-7),
				"x-error-stack": []any{"a", int8(1)}, "x-error-origin": 1.5,
			},
			want: Failure{
				Type: "-7", Message: "-0.05", Stack: `["a",{"type":"int8","value":1}]`, Origin: "generic",
				Extra: map[string]string{"origin": "1.5"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := ExtractFailure(tt.headers, tt.props)
			require.Equal(t, tt.want, got)
			_, err := json.Marshal(got)
			require.NoError(t, err)
		})
	}
}

func TestFailureJSON(t *testing.T) {
	t.Parallel()
	f := ExtractFailure(nServiceBusHeaders(), Properties{})
	got, err := json.Marshal(f)
	require.NoError(t, err)
	require.Contains(t, string(got), `"origin":"nservicebus"`)
	require.Contains(t, string(got), `"at":"2024-03-05T14:07:09.123456Z"`)

	empty, err := json.Marshal(Failure{})
	require.NoError(t, err)
	require.Equal(t, `{}`, string(empty))
}

func TestParseFailureTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string // RFC 3339 with nanoseconds, "" for no parse
	}{
		{"2024-03-05 14:07:09:123456 Z", "2024-03-05T14:07:09.123456Z"},
		{"2024-03-05 14:07:09:1 Z", "2024-03-05T14:07:09.1Z"},
		{"2024-03-05 14:07:09:123456789123 Z", "2024-03-05T14:07:09.123456789Z"},
		{"2024-03-05 14:07:09:000000Z", "2024-03-05T14:07:09Z"},
		{" 2024-03-05 14:07:09:5 Z ", "2024-03-05T14:07:09.5Z"},
		{"2024-03-05T14:07:09.1234567Z", "2024-03-05T14:07:09.1234567Z"},
		{"2024-03-05T15:07:09.1234567+01:00", "2024-03-05T14:07:09.1234567Z"},
		{"2024-03-05T14:07:09.1234567", "2024-03-05T14:07:09.1234567Z"},
		{"2024-03-05T14:07:09Z", "2024-03-05T14:07:09Z"},
		{"2024-03-05 14:07:09Z", "2024-03-05T14:07:09Z"},
		{"2024-03-05 14:07:09", "2024-03-05T14:07:09Z"},
		{"2024-03-05 14:07:09: Z", ""},
		{"2024-03-05 14:07:09:12 +01", ""},
		{"2024-13-05 14:07:09:12 Z", ""},
		{"", ""},
		{"now", ""},
	}
	for _, tt := range tests {
		got := parseFailureTime(tt.in)
		if tt.want == "" {
			require.True(t, got.IsZero(), "%q parsed as %v", tt.in, got)
			continue
		}
		require.Equal(t, tt.want, got.UTC().Format(time.RFC3339Nano), tt.in)
	}
}

func TestJavaExceptionType(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"java.lang.IllegalStateException: msg\n\tat x": "java.lang.IllegalStateException",
		"java.lang.IllegalStateException":              "java.lang.IllegalStateException",
		"com.example.Outer$InnerException: a: b: c":    "com.example.Outer$InnerException",
		"  java.io.IOException: x\r\n\tat y":           "java.io.IOException",
		springStack:                                    "java.lang.IllegalStateException",
		"org.springframework.amqp.rabbit.support.ListenerExecutionFailedException: failed\n\tat x": "org.springframework.amqp.rabbit.support.ListenerExecutionFailedException",
		"":                          "",
		"Something went wrong: yes": "",
		"123.Bad: x":                "",
		".Bad: x":                   "",
	}
	for in, want := range tests {
		require.Equal(t, want, javaExceptionType(in), in)
	}
}

func TestFormatDecimal(t *testing.T) {
	t.Parallel()
	for d, want := range map[amqp.Decimal]string{
		{Scale: 0, Value: 42}:          "42",
		{Scale: 2, Value: 12345}:       "123.45",
		{Scale: 2, Value: -5}:          "-0.05",
		{Scale: 3, Value: 5}:           "0.005",
		{Scale: 1, Value: -2147483648}: "-214748364.8",
		{Scale: 12, Value: 2147483647}: "0.002147483647",
	} {
		require.Equal(t, want, formatDecimal(d))
	}
}

func TestLookupFailureField(t *testing.T) {
	t.Parallel()
	for f := ffNone + 1; f < ffCount; f++ {
		name := failureHeaderNames[f]
		require.NotEmpty(t, name, "field %d has no name", f)
		require.Equal(t, f, lookupFailureField(name), name)
		require.Equal(t, f, lookupFailureField(strings.ToUpper(name)), name)
	}
	require.Equal(t, ffNone, lookupFailureField("x-death"))
	require.Equal(t, ffNone, lookupFailureField(""))
	require.Equal(t, ffNone, lookupFailureField(strings.Repeat("x", 500)))
}

func TestExtractFailureNoConventionAllocatesNothing(t *testing.T) {
	h := realisticHeaders()
	allocs := testing.AllocsPerRun(100, func() {
		_ = ExtractFailure(h, Properties{})
	})
	require.Zero(t, allocs)
}

func BenchmarkExtractFailure(b *testing.B) {
	for name, h := range map[string]amqp.Table{
		"none":        realisticHeaders(),
		"spring":      merge(realisticHeaders(), springHeaders()),
		"masstransit": massTransitHeaders(),
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = ExtractFailure(h, Properties{})
			}
		})
	}
}
