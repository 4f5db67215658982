package broker

import (
	"slices"
	"time"
)

// AppendJSON appends f as a JSON object, byte for byte what
// encoding/json.Marshal gives for it (the field names and omitempty of
// Failure's tags, Extra's keys in order, At in RFC 3339 with nanoseconds).
// Ingest writes one for every message that carries failure details, and
// encoding/json's reflection was a tenth of converting a delivery.
//
// ExtractFailure's texts are valid UTF-8 and its times within the years
// 1–9999, which encoding/json needs too; invalid UTF-8 elsewhere becomes
// U+FFFD, as encoding/json writes it, and a year it would refuse is left
// out rather than failing the whole object.
func (f Failure) AppendJSON(dst []byte) []byte {
	dst = append(dst, '{')
	first := true
	key := func(name string) {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, '"')
		dst = append(dst, name...)
		dst = append(dst, '"', ':')
	}
	str := func(name, v string) {
		if v != "" {
			key(name)
			dst = appendEscaped(dst, v)
		}
	}
	str("type", f.Type)
	str("message", f.Message)
	str("stack", f.Stack)
	str("origin", f.Origin)
	if len(f.Extra) > 0 {
		key("extra")
		dst = append(dst, '{')
		keys := make([]string, 0, len(f.Extra))
		for k := range f.Extra {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendEscaped(dst, k)
			dst = append(dst, ':')
			dst = appendEscaped(dst, f.Extra[k])
		}
		dst = append(dst, '}')
	}
	if f.At != nil && f.At.Year() >= 0 && f.At.Year() <= 9999 {
		key("at")
		dst = append(dst, '"')
		dst = f.At.AppendFormat(dst, time.RFC3339Nano)
		dst = append(dst, '"')
	}
	return append(dst, '}')
}
