package broker

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestIsFailureDetailHeader: the headers describing a failure, in every
// convention and any case, but not those the application reads (Celery's
// protocol, the message's and the host's descriptions).
func TestIsFailureDetailHeader(t *testing.T) {
	t.Parallel()
	for _, h := range []string{"x-exception-message", "X-Exception-Stacktrace", "x-exception-fqcn", "x-original-routingKey",
		"x-exception-type", "x-error", "x-error-origin", "NServiceBus.ExceptionInfo.Message", "NServiceBus.FailedQ",
		"NServiceBus.TimeOfFailure", "MT-Fault-Message", "MT-Reason", "mt-fault-retrycount"} {
		require.True(t, IsFailureDetailHeader(h), h)
		require.True(t, IsFailureHeader(h), h)
	}
	for _, h := range []string{"task", "id", "retries", "argsrepr", "NServiceBus.EnclosedMessageTypes", "NServiceBus.ProcessingEndpoint",
		"MT-Host-MachineName", "x-order-id", "x-death", "content-type"} {
		require.False(t, IsFailureDetailHeader(h), h)
	}
}
