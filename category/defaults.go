package category

// DefaultRules returns the built-in rules, in the order they apply, after
// any of the operator's. Each is a case-insensitive list of words matched
// in the failure type or message (how NServiceBus, MassTransit, Spring,
// Celery and hand-written consumers name .NET, Java, Python, Node and Go
// errors), except the last two, which look at the death reason alone.
// Transient rules come first: "validation service unavailable" is worth
// retrying. docs/REPLAY.md lists them; a test holds the list to this one.
func DefaultRules() []Rule {
	return []Rule{
		{Name: "timeout", Category: Transient,
			Failure: `(?i)timeout|timed out|deadline exceeded|etimedout`},
		{Name: "connection", Category: Transient,
			Failure: `(?i)connection refused|connection reset|connection closed|connection aborted|connection was closed|` +
				`econnrefused|econnreset|econnaborted|broken pipe|socket hang up|connectexception|` +
				`no route to host|host unreachable|network is unreachable|brokerunreachable|name resolution`},
		{Name: "throttled_or_unavailable", Category: Transient,
			Failure: `(?i)too many requests|service unavailable|temporarily unavailable|bad gateway|gateway timeout|` +
				`rate limit|ratelimit|throttl|status code 429|status code 502|status code 503|status code 504|` +
				`http 429|http 502|http 503|http 504|error 429|error 503`},
		{Name: "deadlock", Category: Transient,
			Failure: `(?i)deadlock|lock wait|could not serialize access|serialization failure|lock request time out|optimisticlock|optimistic lock|concurrency conflict`},
		{Name: "deserialization", Category: Permanent,
			Failure: `(?i)deserializ|deserialis|serializationexception|jsonexception|jsonparseexception|jsonreaderexception|` +
				`jsondecodeerror|messageconversionexception|httpmessagenotreadable|unmarshal|invalid json|` +
				`malformed|unexpected token|unexpected end of json|unexpected character|mismatchedinputexception|` +
				`invalidformatexception|invalidprotocolbufferexception|unicodedecodeerror|cannot parse|could not parse|parse error`},
		{Name: "validation", Category: Permanent,
			Failure: `(?i)validation|invalid argument|illegalargumentexception|argumentexception|argumentnullexception|` +
				`argumentoutofrangeexception|formatexception|valueerror|constraint violation|constraintviolation|` +
				`methodargumentnotvalid|unprocessable entity|status code 400|status code 422|bad request`},
		{Name: "null_reference", Category: Permanent,
			Failure: `(?i)nullreferenceexception|nullpointerexception|null reference|object reference not set|` +
				`nil pointer|nonetype|cannot read propert|undefined is not|is not a function`},
		{Name: "schema", Category: Permanent,
			Failure: `(?i)schema|unknown field|unrecognized field|unrecognizedpropertyexception|missing required|` +
				`required property|required field|missing field|no such column|undefined column`},
		// No failure details at all, but RabbitMQ's reason says enough: the
		// message was never processed, so sending it again is what helps.
		{Name: "expired", Category: Transient, Reasons: []string{"expired"}},
		{Name: "maxlen", Category: Transient, Reasons: []string{"maxlen"}},
	}
}
