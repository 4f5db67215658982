package bench

// What the benchmarks share to compute and record their figures.

import (
	"encoding/json"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// appendJSON appends v as one JSON line to the file at path (the -out
// flag of every benchmark).
func appendJSON(path string, v any) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	return err
}

// histogram returns the sum and count of a histogram in reg.
func histogram(reg *prometheus.Registry, name string) (float64, uint64) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, 0
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				return h.GetSampleSum(), h.GetSampleCount()
			}
		}
	}
	return 0, 0
}

// metricSum returns the sum of a counter's series in g.
func metricSum(g prometheus.Gatherer, name string) float64 {
	mfs, err := g.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if c := m.GetCounter(); c != nil {
				sum += c.GetValue()
			}
		}
	}
	return sum
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// pct returns the p-quantile of the sorted durations d.
func pct(d []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(d)))) - 1
	return d[max(0, min(i, len(d)-1))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// loadAvg is the 1-minute load average (0 where /proc is missing).
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	return f
}

// usPerMsg turns a CPU share in percent of one core over secs seconds
// into microseconds of CPU time per message of n: the same figure from
// dlq-bench's results and from bench-limits' (cpu_*_pct, secs, n).
func usPerMsg(pct, secs float64, n int) float64 {
	if n <= 0 {
		return 0
	}
	return pct / 100 * secs / float64(n) * 1e6
}

// median of xs (the mean of the middle two for an even count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
