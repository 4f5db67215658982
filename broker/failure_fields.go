package broker

// The headers the failure conventions use: a field for each, its name as
// the convention spells it, and the lookup of a header name in any case
// (failure.go reads the fields' values into a Failure).

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
