package alerts

import "math"

// CountLimit is how far a count measured for rules of kind k must go for
// every rule of that kind, on every source queue, to decide as an exact
// count would: one past the largest threshold of a rule that is on
// anywhere (a rule turned off with a queue override turning it back on
// counts). It returns 0 when no rule of kind k can fire, so nothing need
// be counted.
//
// It exists for KindIngestSpike: the messages of the last five minutes are
// counted row by row, and while a flood arrives that is every row stored in
// those minutes, read again at each evaluation, from the same PostgreSQL
// that ingest writes to. A count that stops at the limit costs at most
// limit rows per queue, and the alert's value then reads "at least".
func (rs RuleSet) CountLimit(k Kind) int64 {
	var top float64
	on := false
	consider := func(r Rule) {
		if r.Disabled {
			return
		}
		on = true
		top = max(top, r.Threshold)
	}
	for _, r := range rs.Rules {
		if r.Kind != k {
			continue
		}
		consider(r)
		for queue := range rs.Overrides {
			consider(rs.effective(r, queue))
		}
	}
	if !on {
		return 0
	}
	if top >= math.MaxInt64/2 {
		return math.MaxInt64
	}
	return int64(math.Floor(top)) + 1
}
