package bench

import (
	"cmp"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"slices"

	"github.com/dlq/dlq/crypt"
)

// Encryption at rest in the benchmarks (-encrypt): off, on, or both,
// interleaved within each run (off then on in odd runs, on then off in
// even ones, so that a drift of the machine weighs on both alike), which
// is how docs/BENCHMARKS.md compares them.

// encryptSettings reads -encrypt.
func encryptSettings(v string) ([]bool, error) {
	switch v {
	case "off":
		return []bool{false}, nil
	case "on":
		return []bool{true}, nil
	case "both":
		return []bool{false, true}, nil
	}
	return nil, fmt.Errorf("-encrypt must be off, on or both, got %q", v)
}

// runOrder is the settings in the order run n measures them.
func runOrder(settings []bool, run int) []bool {
	if run%2 == 0 {
		out := slices.Clone(settings)
		slices.Reverse(out)
		return out
	}
	return settings
}

// benchKey is a random key list entry (DLQ_ENCRYPTION_KEYS) and its ring.
func benchKey() (string, *crypt.Ring, error) {
	b := make([]byte, crypt.KeySize)
	if _, err := rand.Read(b); err != nil {
		return "", nil, err
	}
	entry := "bench:" + base64.StdEncoding.EncodeToString(b)
	keys, err := crypt.ParseKeys(entry)
	if err != nil {
		return "", nil, err
	}
	r, err := crypt.NewRing(keys)
	return entry, r, err
}

// onOffRatio prints, for results with and without encryption, the ratio
// of the medians and the median of the runs' ratios (on/off per run).
func onOffRatio(what string, off, on map[int]float64) {
	if len(off) == 0 || len(on) == 0 {
		return
	}
	median := func(v []float64) float64 {
		slices.Sort(v)
		return v[len(v)/2]
	}
	var offs, ons, ratios []float64
	for run, a := range off {
		offs = append(offs, a)
		if b, ok := on[run]; ok {
			ratios = append(ratios, b/a)
		}
	}
	for _, b := range on {
		ons = append(ons, b)
	}
	lo, hi := 0.0, 0.0
	if len(ratios) > 0 {
		s := slices.Clone(ratios)
		slices.Sort(s)
		lo, hi = s[0], s[len(s)-1]
	}
	fmt.Printf("RESULT %s encryption on/off: %.0f vs %.0f msgs/s, ratio of medians %.3f; median of the runs' ratios %.3f (%.3f–%.3f, %d pairs)\n",
		what, median(ons), median(offs), median(slices.Clone(ons))/cmp.Or(median(slices.Clone(offs)), 1), median(ratios), lo, hi, len(ratios))
}
