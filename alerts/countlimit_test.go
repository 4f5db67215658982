package alerts

import (
	"math"
	"testing"
)

func TestCountLimit(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	off, on := true, false
	spike := func(threshold float64, disabled bool) Rule {
		return Rule{Name: "spike", Kind: KindIngestSpike, Threshold: threshold, Disabled: disabled}
	}
	cases := []struct {
		name string
		rs   RuleSet
		want int64
	}{
		{"the default rules", DefaultRuleSet(), 1001},
		{"no rule of the kind", RuleSet{Rules: []Rule{{Name: "p", Kind: KindPendingCount, Threshold: 5}}}, 0},
		{"turned off", RuleSet{Rules: []Rule{spike(10, true)}}, 0},
		{"a fractional threshold", RuleSet{Rules: []Rule{spike(2.5, false)}}, 3},
		{"threshold zero", RuleSet{Rules: []Rule{spike(0, false)}}, 1},
		{"the larger of two rules", RuleSet{Rules: []Rule{spike(10, false), {Name: "big", Kind: KindIngestSpike, Threshold: 400}}}, 401},
		{"a queue override raises it", RuleSet{Rules: []Rule{spike(10, false)},
			Overrides: Overrides{"orders": {"spike": {Threshold: f(5000)}}}}, 5001},
		{"a queue override turns an off rule on", RuleSet{Rules: []Rule{spike(10, true)},
			Overrides: Overrides{"orders": {"spike": {Disabled: &on, Threshold: f(70)}}}}, 71},
		{"a higher threshold on a queue where the rule is off does not count", RuleSet{Rules: []Rule{spike(10, false)},
			Overrides: Overrides{"orders": {"spike": {Disabled: &off, Threshold: f(9000)}}}}, 11},
		{"an override of another rule does not count", RuleSet{Rules: []Rule{spike(10, false), {Name: "p", Kind: KindPendingCount, Threshold: 5}},
			Overrides: Overrides{"orders": {"p": {Threshold: f(9000)}}}}, 11},
		{"a huge threshold", RuleSet{Rules: []Rule{spike(1e300, false)}}, math.MaxInt64},
	}
	for _, c := range cases {
		if got := c.rs.CountLimit(KindIngestSpike); got != c.want {
			t.Errorf("%s: CountLimit = %d, want %d", c.name, got, c.want)
		}
	}
}

// A count that stopped at the limit decides every rule as the exact count
// would: above each threshold exactly when the exact count is.
func TestCountLimitDecidesAsExact(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	rs := RuleSet{Rules: []Rule{{Name: "spike", Kind: KindIngestSpike, Threshold: 100}, {Name: "spike2", Kind: KindIngestSpike, Threshold: 7.5}},
		Overrides: Overrides{"orders": {"spike": {Threshold: f(250)}}}}
	limit := rs.CountLimit(KindIngestSpike)
	for _, queue := range []string{"orders", "billing"} {
		for _, r := range rs.Rules {
			e := rs.effective(r, queue)
			for exact := int64(0); exact < 1000; exact++ {
				counted := min(exact, limit)
				if (float64(counted) > e.Threshold) != (float64(exact) > e.Threshold) {
					t.Fatalf("%s on %s: count %d stopped at %d decides differently", r.Name, queue, exact, limit)
				}
			}
		}
	}
}
