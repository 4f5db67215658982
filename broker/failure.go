package broker

import (
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Failure is what the failing application said about the error, read from
// the headers that common frameworks add before a message is dead-lettered
// or moved to an error queue. RabbitMQ itself records no error.
//
// Text fields are for display and search: invalid UTF-8 and NUL are replaced
// by U+FFFD so that they fit a PostgreSQL text column; the exact header
// values stay in the stored headers.
type Failure struct {
	Type    string `json:"type,omitempty"`
	Message string `json:"message,omitempty"`
	Stack   string `json:"stack,omitempty"`
	// Origin names the convention that supplied the details: nservicebus,
	// masstransit, spring, celery or generic.
	Origin string `json:"origin,omitempty"`
	// Extra holds convention-specific fields worth showing (failed queue,
	// original exchange and routing key, task name, host, retries …).
	Extra map[string]string `json:"extra,omitempty"`
	At    *time.Time        `json:"at,omitempty"` // time of failure, UTC, when the convention carries one
}

// Failure origins.
const (
	originNServiceBus = "nservicebus"
	originMassTransit = "masstransit"
	originSpring      = "spring"
	originCelery      = "celery"
	originGeneric     = "generic"
)

// failureHeaders are the convention headers found in one table.
type failureHeaders struct {
	v     [ffCount]any
	exact [ffCount]bool
}

// collect records the convention headers of h and reports whether any was
// found.
func (fh *failureHeaders) collect(h amqp.Table) bool {
	found := false
	for k, v := range h {
		f := lookupFailureField(k)
		if f == ffNone || v == nil {
			continue
		}
		exact := k == failureHeaderNames[f]
		if fh.v[f] != nil && (fh.exact[f] || !exact) {
			continue // keep the exact spelling; among variants, any one
		}
		fh.v[f], fh.exact[f] = v, exact
		found = true
	}
	return found
}

func (fh *failureHeaders) has(fields ...failureField) bool {
	for _, f := range fields {
		if fh.v[f] != nil {
			return true
		}
	}
	return false
}

// text returns the first of fields present with non-blank text.
func (fh *failureHeaders) text(fields ...failureField) string {
	for _, f := range fields {
		if s := failureText(fh.v[f]); strings.TrimSpace(s) != "" {
			return s
		}
	}
	return ""
}

// extra copies fields that are present into e under the given names.
func (fh *failureHeaders) extra(e map[string]string, pairs ...any) {
	for i := 0; i+1 < len(pairs); i += 2 {
		name, f := pairs[i].(string), pairs[i+1].(failureField)
		if s := failureText(fh.v[f]); s != "" {
			e[name] = s
		}
	}
}

// ExtractFailure reads failure details from the conventions dlq knows. When
// several are present the most specific framework wins, in this order:
// NServiceBus, MassTransit, Spring, Celery; it decides Origin and Extra.
// The generic headers (x-exception-type, x-error-type, x-error-message,
// x-error, x-error-stack, x-exception-stack, x-error-origin) then fill what
// is still empty, so an application that adds its own x-error-message to a
// Celery task still shows it. p supplies Celery's correlation id. With no
// convention present the result is the zero Failure.
func ExtractFailure(h amqp.Table, p Properties) Failure {
	// Most dead messages carry no convention at all: that path allocates
	// nothing.
	var fh failureHeaders
	if !fh.collect(h) {
		return Failure{}
	}
	var f Failure
	extra := map[string]string{}
	switch {
	case fh.has(ffNSBType, ffNSBMessage, ffNSBStack, ffNSBFailedQ, ffNSBTimeOfFailure):
		f = fh.nserviceBus(extra)
	case fh.has(ffMTType, ffMTMessage, ffMTStack, ffMTTimestamp, ffMTReason):
		f = fh.massTransit(extra)
	case fh.has(ffSpringMessage, ffSpringStack, ffSpringFQCN):
		f = fh.spring(extra)
	case fh.has(ffCeleryTask) && (fh.has(ffCeleryID) || strings.EqualFold(fh.text(ffCeleryLang), "py")):
		f = fh.celery(extra, p.CorrelationID)
	}
	f = fh.fillGeneric(f)
	if f.Origin == "" {
		return Failure{}
	}
	if _, taken := extra["origin"]; !taken {
		fh.extra(extra, "origin", ffGenOrigin)
	}
	return cleanFailure(f, extra)
}

// nserviceBus reads NServiceBus's failure details, its other headers into
// extra.
func (fh *failureHeaders) nserviceBus(extra map[string]string) Failure {
	f := Failure{
		Origin:  originNServiceBus,
		Type:    fh.text(ffNSBType),
		Message: fh.text(ffNSBMessage),
		Stack:   fh.text(ffNSBStack),
	}
	fh.extra(extra,
		"failed_queue", ffNSBFailedQ,
		"inner_exception_type", ffNSBInnerType,
		"source", ffNSBSource,
		"help_link", ffNSBHelpLink,
		"processing_endpoint", ffNSBEndpoint,
		"processing_machine", ffNSBMachine,
		"enclosed_message_types", ffNSBMessageTypes,
		"delayed_retries", ffNSBRetries)
	f.At = failureTime(fh.v[ffNSBTimeOfFailure], extra)
	return f
}

// massTransit reads MassTransit's failure details, its other headers into
// extra.
func (fh *failureHeaders) massTransit(extra map[string]string) Failure {
	f := Failure{
		Origin:  originMassTransit,
		Type:    fh.text(ffMTType),
		Message: fh.text(ffMTMessage),
		Stack:   fh.text(ffMTStack),
	}
	fh.extra(extra,
		"reason", ffMTReason,
		"input_address", ffMTInputAddress,
		"message_type", ffMTMessageType,
		"consumer_type", ffMTConsumerType,
		"retry_count", ffMTRetryCount,
		"redelivery_count", ffMTRedeliveryCount,
		"host_machine_name", ffMTHostMachine,
		"host_process_name", ffMTHostProcess,
		"host_process_id", ffMTHostProcessID,
		"host_assembly", ffMTHostAssembly,
		"host_assembly_version", ffMTHostAssemblyVersion,
		"host_masstransit_version", ffMTHostVersion)
	f.At = failureTime(fh.v[ffMTTimestamp], extra)
	return f
}

// spring reads Spring AMQP's failure details, the original exchange and
// routing key into extra.
func (fh *failureHeaders) spring(extra map[string]string) Failure {
	f := Failure{
		Origin:  originSpring,
		Message: fh.text(ffSpringMessage),
		Stack:   fh.text(ffSpringStack),
		// An explicit class beats one derived from the trace.
		Type: fh.text(ffSpringFQCN, ffGenExceptionType, ffGenErrorType),
	}
	if f.Type == "" {
		f.Type = javaExceptionType(f.Stack)
	}
	fh.extra(extra,
		"original_exchange", ffSpringOrigExchange,
		"original_routing_key", ffSpringOrigRoutingKey)
	return f
}

// celery reads Celery's task headers into extra, with the message's
// correlation id.
func (fh *failureHeaders) celery(extra map[string]string, correlationID string) Failure {
	// Celery puts no exception in headers; only the task is known.
	fh.extra(extra,
		"task", ffCeleryTask,
		"id", ffCeleryID,
		"retries", ffCeleryRetries,
		"argsrepr", ffCeleryArgs,
		"kwargsrepr", ffCeleryKwargs,
		"root_id", ffCeleryRootID,
		"parent_id", ffCeleryParentID,
		"origin", ffCeleryOrigin)
	if correlationID != "" {
		extra["correlation_id"] = correlationID
	}
	return Failure{Origin: originCelery}
}

// fillGeneric fills what f still lacks from the generic headers, which
// are its origin when no framework's are present.
func (fh *failureHeaders) fillGeneric(f Failure) Failure {
	if !fh.has(ffGenExceptionType, ffGenErrorType, ffGenErrorMessage, ffGenError,
		ffGenErrorStack, ffGenErrorStacktrace, ffGenExceptionStack) {
		return f
	}
	if f.Origin == "" {
		f.Origin = originGeneric
	}
	if f.Type == "" {
		f.Type = fh.text(ffGenExceptionType, ffGenErrorType)
	}
	if f.Message == "" {
		f.Message = fh.text(ffGenErrorMessage, ffGenError)
	}
	if f.Stack == "" {
		f.Stack = fh.text(ffGenErrorStack, ffGenErrorStacktrace, ffGenExceptionStack)
	}
	return f
}

// cleanFailure makes f's texts and extra's values fit a text column (see
// Failure), and gives f extra unless it is empty.
func cleanFailure(f Failure, extra map[string]string) Failure {
	f.Type = cleanText(strings.TrimSpace(f.Type))
	f.Message = cleanText(f.Message)
	f.Stack = cleanText(f.Stack)
	for k, v := range extra {
		extra[k] = cleanText(v)
	}
	if len(extra) > 0 {
		f.Extra = extra
	}
	return f
}

// IsFailureDetailHeader reports whether a header carries the details of
// a failure in a framework's convention: the exception's type, message,
// stack and source, when and where it failed, the fault's reason and
// retry counts. A corrected copy sent again should not carry them into
// its next attempt, where they would describe a failure that has not
// happened. Celery's protocol headers (task, id, retries, …) and the
// NServiceBus and MassTransit headers that describe the message or the
// host are not among them: the application reads those.
func IsFailureDetailHeader(name string) bool {
	switch f := lookupFailureField(name); f {
	case ffNSBType, ffNSBMessage, ffNSBStack, ffNSBSource, ffNSBHelpLink, ffNSBInnerType, ffNSBFailedQ, ffNSBTimeOfFailure,
		ffMTType, ffMTMessage, ffMTStack, ffMTTimestamp, ffMTReason, ffMTInputAddress, ffMTMessageType, ffMTConsumerType,
		ffMTRetryCount, ffMTRedeliveryCount,
		ffSpringMessage, ffSpringStack, ffSpringFQCN, ffSpringOrigExchange, ffSpringOrigRoutingKey:
		return true
	default:
		return f >= ffGenExceptionType && f < ffCount
	}
}

// IsFailureHeader reports whether a header is one of those the failure
// details are read from, in any framework's convention: where a failure
// message or stack trace may be. Encryption at rest seals them with the
// failure details.
func IsFailureHeader(name string) bool { return lookupFailureField(name) != ffNone }
