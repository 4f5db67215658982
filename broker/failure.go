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

// failureField identifies a header that some convention uses.
type failureField int

const (
	ffNone failureField = iota

	// NServiceBus: every header is a string.
	ffNSBType
	ffNSBMessage
	ffNSBStack
	ffNSBSource
	ffNSBHelpLink
	ffNSBInnerType
	ffNSBFailedQ
	ffNSBTimeOfFailure
	ffNSBEndpoint
	ffNSBMachine
	ffNSBMessageTypes
	ffNSBRetries

	// MassTransit.
	ffMTType
	ffMTMessage
	ffMTStack
	ffMTTimestamp
	ffMTReason
	ffMTInputAddress
	ffMTMessageType
	ffMTConsumerType
	ffMTRetryCount
	ffMTRedeliveryCount
	ffMTHostMachine
	ffMTHostProcess
	ffMTHostProcessID
	ffMTHostAssembly
	ffMTHostAssemblyVersion
	ffMTHostVersion

	// Spring AMQP RepublishMessageRecoverer (and the Spring Cloud Stream
	// binders, which add the exception class).
	ffSpringMessage
	ffSpringStack
	ffSpringFQCN
	ffSpringOrigExchange
	ffSpringOrigRoutingKey

	// Celery message protocol v2.
	ffCeleryTask
	ffCeleryID
	ffCeleryLang
	ffCeleryRetries
	ffCeleryArgs
	ffCeleryKwargs
	ffCeleryRootID
	ffCeleryParentID
	ffCeleryOrigin

	// No framework: names applications pick by hand.
	ffGenExceptionType
	ffGenErrorType
	ffGenErrorMessage
	ffGenError
	ffGenErrorStack
	ffGenErrorStacktrace
	ffGenExceptionStack
	ffGenOrigin

	ffCount
)

// failureHeaderNames holds each field's header name as the convention
// spells it. A header whose name differs only in case is accepted too; when
// both spellings are present, the exact one wins.
var failureHeaderNames = [ffCount]string{
	ffNSBType:          "NServiceBus.ExceptionInfo.ExceptionType",
	ffNSBMessage:       "NServiceBus.ExceptionInfo.Message",
	ffNSBStack:         "NServiceBus.ExceptionInfo.StackTrace",
	ffNSBSource:        "NServiceBus.ExceptionInfo.Source",
	ffNSBHelpLink:      "NServiceBus.ExceptionInfo.HelpLink",
	ffNSBInnerType:     "NServiceBus.ExceptionInfo.InnerExceptionType",
	ffNSBFailedQ:       "NServiceBus.FailedQ",
	ffNSBTimeOfFailure: "NServiceBus.TimeOfFailure",
	ffNSBEndpoint:      "NServiceBus.ProcessingEndpoint",
	ffNSBMachine:       "NServiceBus.ProcessingMachine",
	ffNSBMessageTypes:  "NServiceBus.EnclosedMessageTypes",
	ffNSBRetries:       "NServiceBus.Retries",

	ffMTType:                "MT-Fault-ExceptionType",
	ffMTMessage:             "MT-Fault-Message",
	ffMTStack:               "MT-Fault-StackTrace",
	ffMTTimestamp:           "MT-Fault-Timestamp",
	ffMTReason:              "MT-Reason",
	ffMTInputAddress:        "MT-Fault-InputAddress",
	ffMTMessageType:         "MT-Fault-MessageType",
	ffMTConsumerType:        "MT-Fault-ConsumerType",
	ffMTRetryCount:          "MT-Fault-RetryCount",
	ffMTRedeliveryCount:     "MT-Fault-RedeliveryCount",
	ffMTHostMachine:         "MT-Host-MachineName",
	ffMTHostProcess:         "MT-Host-ProcessName",
	ffMTHostProcessID:       "MT-Host-ProcessId",
	ffMTHostAssembly:        "MT-Host-Assembly",
	ffMTHostAssemblyVersion: "MT-Host-AssemblyVersion",
	ffMTHostVersion:         "MT-Host-MassTransitVersion",

	ffSpringMessage:        "x-exception-message",
	ffSpringStack:          "x-exception-stacktrace",
	ffSpringFQCN:           "x-exception-fqcn",
	ffSpringOrigExchange:   "x-original-exchange",
	ffSpringOrigRoutingKey: "x-original-routingKey",

	ffCeleryTask:     "task",
	ffCeleryID:       "id",
	ffCeleryLang:     "lang",
	ffCeleryRetries:  "retries",
	ffCeleryArgs:     "argsrepr",
	ffCeleryKwargs:   "kwargsrepr",
	ffCeleryRootID:   "root_id",
	ffCeleryParentID: "parent_id",
	ffCeleryOrigin:   "origin",

	ffGenExceptionType:   "x-exception-type",
	ffGenErrorType:       "x-error-type",
	ffGenErrorMessage:    "x-error-message",
	ffGenError:           "x-error",
	ffGenErrorStack:      "x-error-stack",
	ffGenErrorStacktrace: "x-error-stacktrace",
	ffGenExceptionStack:  "x-exception-stack",
	ffGenOrigin:          "x-error-origin",
}

// lookupFailureField finds the field for a header name in any ASCII case
// without allocating: the name is lowered into a stack buffer and matched
// by a switch.
func lookupFailureField(name string) failureField {
	const longest = len("nservicebus.exceptioninfo.innerexceptiontype")
	if len(name) < 2 || len(name) > longest {
		return ffNone
	}
	var buf [longest]byte
	lower := buf[:len(name)]
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		lower[i] = c
	}
	// Each convention's names share a prefix but Celery's, which have
	// none of the others': one comparison picks the switch that can hold
	// the name. The switches take the bytes, not a string, so that
	// matching allocates nothing.
	switch {
	case hasPrefix(lower, "nservicebus."):
		return nserviceBusField(lower)
	case hasPrefix(lower, "mt-"):
		return massTransitField(lower)
	case hasPrefix(lower, "x-"):
		return xHeaderField(lower)
	}
	return celeryField(lower)
}

func hasPrefix(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && string(b[:len(prefix)]) == prefix
}

// nserviceBusField is lookupFailureField for a lowered name that starts
// with "nservicebus.".
func nserviceBusField(lower []byte) failureField {
	switch string(lower) {
	case "nservicebus.exceptioninfo.exceptiontype":
		return ffNSBType
	case "nservicebus.exceptioninfo.message":
		return ffNSBMessage
	case "nservicebus.exceptioninfo.stacktrace":
		return ffNSBStack
	case "nservicebus.exceptioninfo.source":
		return ffNSBSource
	case "nservicebus.exceptioninfo.helplink":
		return ffNSBHelpLink
	case "nservicebus.exceptioninfo.innerexceptiontype":
		return ffNSBInnerType
	case "nservicebus.failedq":
		return ffNSBFailedQ
	case "nservicebus.timeoffailure":
		return ffNSBTimeOfFailure
	case "nservicebus.processingendpoint":
		return ffNSBEndpoint
	case "nservicebus.processingmachine":
		return ffNSBMachine
	case "nservicebus.enclosedmessagetypes":
		return ffNSBMessageTypes
	case "nservicebus.retries":
		return ffNSBRetries
	}
	return ffNone
}

// massTransitField is lookupFailureField for a lowered name that starts
// with "mt-".
func massTransitField(lower []byte) failureField {
	switch string(lower) {
	case "mt-fault-exceptiontype":
		return ffMTType
	case "mt-fault-message":
		return ffMTMessage
	case "mt-fault-stacktrace":
		return ffMTStack
	case "mt-fault-timestamp":
		return ffMTTimestamp
	case "mt-reason":
		return ffMTReason
	case "mt-fault-inputaddress":
		return ffMTInputAddress
	case "mt-fault-messagetype":
		return ffMTMessageType
	case "mt-fault-consumertype":
		return ffMTConsumerType
	case "mt-fault-retrycount":
		return ffMTRetryCount
	case "mt-fault-redeliverycount":
		return ffMTRedeliveryCount
	case "mt-host-machinename":
		return ffMTHostMachine
	case "mt-host-processname":
		return ffMTHostProcess
	case "mt-host-processid":
		return ffMTHostProcessID
	case "mt-host-assembly":
		return ffMTHostAssembly
	case "mt-host-assemblyversion":
		return ffMTHostAssemblyVersion
	case "mt-host-masstransitversion":
		return ffMTHostVersion
	}
	return ffNone
}

// xHeaderField is lookupFailureField for a lowered name that starts with
// "x-": Spring's headers and the generic ones.
func xHeaderField(lower []byte) failureField {
	switch string(lower) {
	case "x-exception-message":
		return ffSpringMessage
	case "x-exception-stacktrace":
		return ffSpringStack
	case "x-exception-fqcn":
		return ffSpringFQCN
	case "x-original-exchange":
		return ffSpringOrigExchange
	case "x-original-routingkey":
		return ffSpringOrigRoutingKey
	case "x-exception-type":
		return ffGenExceptionType
	case "x-error-type":
		return ffGenErrorType
	case "x-error-message":
		return ffGenErrorMessage
	case "x-error":
		return ffGenError
	case "x-error-stack":
		return ffGenErrorStack
	case "x-error-stacktrace":
		return ffGenErrorStacktrace
	case "x-exception-stack":
		return ffGenExceptionStack
	case "x-error-origin":
		return ffGenOrigin
	}
	return ffNone
}

// celeryField is lookupFailureField for a lowered name with none of the
// other conventions' prefixes.
func celeryField(lower []byte) failureField {
	switch string(lower) {
	case "task":
		return ffCeleryTask
	case "id":
		return ffCeleryID
	case "lang":
		return ffCeleryLang
	case "retries":
		return ffCeleryRetries
	case "argsrepr":
		return ffCeleryArgs
	case "kwargsrepr":
		return ffCeleryKwargs
	case "root_id":
		return ffCeleryRootID
	case "parent_id":
		return ffCeleryParentID
	case "origin":
		return ffCeleryOrigin
	}
	return ffNone
}

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
