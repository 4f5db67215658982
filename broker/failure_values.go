package broker

// Reading the values of failure headers: text as a column takes it,
// numbers and times in each framework's formats, and a Java exception's
// type from its stack (failure_fields.go names the headers, failure.go
// maps them to a Failure).

import (
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// cleanText makes s fit a text column (see Failure).
func cleanText(s string) string {
	if isSafeText(s) {
		return s
	}
	return displayText(s)
}

// failureText renders a header value as text: strings and byte arrays as
// they are, numbers in decimal, timestamps in RFC 3339, tables and arrays
// in the typed JSON encoding.
func failureText(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []byte:
		return string(x)
	case bool:
		return strconv.FormatBool(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case int16:
		return strconv.FormatInt(int64(x), 10)
	case int8:
		return strconv.FormatInt(int64(x), 10)
	case int:
		return strconv.Itoa(x)
	case uint8:
		return strconv.FormatUint(uint64(x), 10)
	case uint16:
		return strconv.FormatUint(uint64(x), 10)
	case uint32:
		return strconv.FormatUint(uint64(x), 10)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case time.Time:
		return x.UTC().Format(time.RFC3339)
	case amqp.Decimal:
		return formatDecimal(x)
	}
	b, err := AppendValueJSON(nil, v)
	if err != nil {
		return ""
	}
	return string(b)
}

// formatDecimal writes value × 10^-scale in plain decimal notation.
func formatDecimal(d amqp.Decimal) string {
	neg := d.Value < 0
	digits := strconv.FormatInt(int64(d.Value), 10)
	if neg {
		digits = digits[1:]
	}
	if s := int(d.Scale); s > 0 {
		if len(digits) <= s {
			digits = strings.Repeat("0", s-len(digits)+1) + digits
		}
		digits = digits[:len(digits)-s] + "." + digits[len(digits)-s:]
	}
	if neg {
		return "-" + digits
	}
	return digits
}

// failureTime parses a time-of-failure header. A value that does not parse
// is kept as text in extra["time_of_failure"] rather than dropped.
func failureTime(v any, extra map[string]string) *time.Time {
	if v == nil {
		return nil
	}
	var t time.Time
	switch x := v.(type) {
	case time.Time:
		t = x
	case string:
		t = parseFailureTime(x)
	case []byte:
		t = parseFailureTime(string(x))
	}
	if t.IsZero() || t.Year() < 1 || t.Year() > 9999 {
		if s := failureText(v); s != "" {
			extra["time_of_failure"] = s
		}
		return nil
	}
	t = t.UTC()
	return &t
}

// parseFailureTime reads the time formats the conventions use: ISO 8601 /
// RFC 3339 with up to 9 fractional digits (MassTransit writes .NET's "O"
// format, with or without an offset), and NServiceBus's wire format
// "2006-01-02 15:04:05:000000 Z". Times without a zone are UTC.
func parseFailureTime(s string) time.Time {
	s = strings.TrimSpace(s)
	if t, ok := parseNServiceBusTime(s); ok {
		return t
	}
	for _, layout := range []string{
		time.RFC3339Nano,
		"2006-01-02T15:04:05.999999999",
		"2006-01-02 15:04:05.999999999Z07:00",
		"2006-01-02 15:04:05.999999999",
	} {
		if t, err := time.Parse(layout, s); err == nil {
			return t
		}
	}
	return time.Time{}
}

// parseNServiceBusTime parses "yyyy-MM-dd HH:mm:ss:ffffff Z", where the
// fraction follows a colon, which time.Parse cannot express.
func parseNServiceBusTime(s string) (time.Time, bool) {
	const dateTime = "2006-01-02 15:04:05"
	if len(s) < len(dateTime)+2 || s[len(dateTime)] != ':' {
		return time.Time{}, false
	}
	t, err := time.Parse(dateTime, s[:len(dateTime)])
	if err != nil {
		return time.Time{}, false
	}
	rest := s[len(dateTime)+1:]
	n := 0
	nanos := 0
	for n < len(rest) && '0' <= rest[n] && rest[n] <= '9' {
		if n < 9 {
			nanos = nanos*10 + int(rest[n]-'0')
		}
		n++
	}
	if n == 0 {
		return time.Time{}, false
	}
	for i := n; i < 9; i++ {
		nanos *= 10
	}
	if zone := strings.TrimSpace(rest[n:]); zone != "Z" && zone != "" {
		return time.Time{}, false
	}
	return t.Add(time.Duration(nanos)), true
}

// javaExceptionType takes the exception class from a Java stack trace:
// "java.lang.IllegalStateException: boom" gives java.lang.IllegalStateException.
// Spring wraps listener errors in ListenerExecutionFailedException and puts
// the cause's message in x-exception-message, so for that wrapper the class
// of the first "Caused by:" line is the one that matches the message.
func javaExceptionType(stack string) string {
	line, rest, _ := strings.Cut(stack, "\n")
	typ := javaClassName(line)
	if typ == "" || !strings.HasSuffix(typ, "ListenerExecutionFailedException") {
		return typ
	}
	for rest != "" {
		line, rest, _ = strings.Cut(rest, "\n")
		if after, ok := strings.CutPrefix(strings.TrimSpace(line), "Caused by:"); ok {
			if cause := javaClassName(after); cause != "" {
				return cause
			}
		}
	}
	return typ
}

// javaClassName returns the class at the start of a throwable's toString()
// ("pkg.Class: message" or "pkg.Class"), or "" if the text does not start
// with something shaped like a class name.
func javaClassName(line string) string {
	line = strings.TrimSpace(line)
	name, _, _ := strings.Cut(line, ":")
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 512 {
		return ""
	}
	for _, r := range name {
		ok := r == '.' || r == '$' || r == '_' ||
			'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
		if !ok {
			return ""
		}
	}
	if c := name[0]; c == '.' || '0' <= c && c <= '9' {
		return ""
	}
	return name
}

// IsFailureDetailHeader reports whether a header carries the details of
// a failure in a framework's convention: the exception's type, message,
// stack and source, when and where it failed, the fault's reason and
// retry counts. A corrected copy sent again should not carry them into
