package broker

import (
	"maps"
	"slices"
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
	o := openObject(dst)
	str := func(name, v string) {
		if v != "" {
			o.key(name)
			o.buf = appendEscaped(o.buf, v)
		}
	}
	str("type", f.Type)
	str("message", f.Message)
	str("stack", f.Stack)
	str("origin", f.Origin)
	if len(f.Extra) > 0 {
		o.key("extra")
		extra := openObject(o.buf)
		for _, k := range slices.Sorted(maps.Keys(f.Extra)) {
			extra.escapedKey(k)
			extra.buf = appendEscaped(extra.buf, f.Extra[k])
		}
		o.buf = extra.close()
	}
	if f.At != nil && f.At.Year() >= 0 && f.At.Year() <= 9999 {
		o.key("at")
		o.time(*f.At)
	}
	return o.close()
}
