package broker

import "time"

// objectWriter writes one JSON object's members into buf, a comma before each
// but the first: the encoders of Properties and Failure, which write what
// encoding/json would without its reflection, share it.
type objectWriter struct {
	buf     []byte
	members int
}

func openObject(dst []byte) *objectWriter { return &objectWriter{buf: append(dst, '{')} }

// key writes a member's name, which needs no escaping, and its colon.
func (o *objectWriter) key(name string) {
	if o.members > 0 {
		o.buf = append(o.buf, ',')
	}
	o.members++
	o.buf = append(o.buf, '"')
	o.buf = append(o.buf, name...)
	o.buf = append(o.buf, '"', ':')
}

// escapedKey writes a member's name that may need escaping (a map's key),
// and its colon.
func (o *objectWriter) escapedKey(name string) {
	if o.members > 0 {
		o.buf = append(o.buf, ',')
	}
	o.members++
	o.buf = appendEscaped(o.buf, name)
	o.buf = append(o.buf, ':')
}

// time writes t as encoding/json does, RFC 3339 with nanoseconds, quoted
// (for a year from 0 to 9999: callers check).
func (o *objectWriter) time(t time.Time) {
	o.buf = append(o.buf, '"')
	o.buf = t.AppendFormat(o.buf, time.RFC3339Nano)
	o.buf = append(o.buf, '"')
}

func (o *objectWriter) close() []byte { return append(o.buf, '}') }
