package bench

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestUsPerMsg(t *testing.T) {
	// 150% of a core for 10 s over 100,000 messages: 15 s of CPU, 150 µs each.
	if got := usPerMsg(150, 10, 100000); !near(got, 150) {
		t.Fatalf("usPerMsg = %v, want 150", got)
	}
	if got := usPerMsg(150, 10, 0); got != 0 {
		t.Fatalf("usPerMsg with n = 0 = %v, want 0", got)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.in); !near(got, c.want) {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func fig(msgs, us float64) *runFigures { return &runFigures{MsgsSec: msgs, UsProgram: us} }

func TestCompare(t *testing.T) {
	// Raw drifts from round to round; within each round HEAD is 0.8 of
	// the baseline except in round 2 (an outlier the median ignores).
	rounds := []roundRuns{
		{Round: 1, Raw: fig(10000, 100), Head: fig(8000, 120), Base: fig(10000, 100)},
		{Round: 2, Raw: fig(12000, 100), Head: fig(12000, 100), Base: fig(12000, 100)},
		{Round: 3, Raw: fig(11000, 100), Head: fig(8800, 130), Base: fig(11000, 100)},
		{Round: 4, Raw: fig(11000, 100), Head: fig(8800, 130)}, // baseline failed: left out
	}
	c, err := compare("text", rounds, 0.10)
	if err != nil {
		t.Fatal(err)
	}
	if c.Rounds != 3 || !near(c.Change, -0.2) || !near(c.HeadRatio, 0.8) || !near(c.BaseRatio, 1) {
		t.Fatalf("compare = %+v, want 3 rounds, change -0.2, ratios 0.8 and 1", c)
	}
	if !c.Slower || !c.Costlier || !near(c.UsChange, 0.2) {
		t.Fatalf("compare = %+v, want slower and costlier by 20%%", c)
	}
	if line := c.verdictLine(0.10, 2); !strings.HasPrefix(line, "VERDICT FAIL text:") || !strings.Contains(line, "WARNING") {
		t.Fatalf("verdict line %q", line)
	}

	// 5% slower with a 10% threshold passes; CPU per message unchanged.
	ok, err := compare("text", []roundRuns{{Round: 1, Raw: fig(10000, 1), Head: fig(9500, 100), Base: fig(10000, 100)}}, 0.10)
	if err != nil {
		t.Fatal(err)
	}
	if ok.Slower || ok.Costlier || !strings.HasPrefix(ok.verdictLine(0.10, 2), "VERDICT PASS") {
		t.Fatalf("compare = %+v, want a pass", ok)
	}

	// Rounds on both sides of the threshold: the verdict says it is noise.
	noisy, err := compare("text", []roundRuns{
		{Round: 1, Raw: fig(10000, 1), Head: fig(13500, 100), Base: fig(10000, 100)},
		{Round: 2, Raw: fig(10000, 1), Head: fig(7200, 100), Base: fig(10000, 100)},
		{Round: 3, Raw: fig(10000, 1), Head: fig(8300, 100), Base: fig(10000, 100)},
	}, 0.10)
	if err != nil {
		t.Fatal(err)
	}
	if line := noisy.verdictLine(0.10, 2); !noisy.Slower || !strings.Contains(line, "NOISY") || !strings.Contains(line, "rounds +35% -28% -17%") {
		t.Fatalf("verdict line %q, want a noisy FAIL with the rounds' changes", line)
	}
	if line := c.verdictLine(0.10, 2); strings.Contains(line, "NOISY") {
		t.Fatalf("verdict line %q: rounds all on one side are not noise", line)
	}

	// A load above the core count as a run started is named.
	loaded := []roundRuns{{Round: 1, Raw: fig(10000, 1), Head: &runFigures{MsgsSec: 9500, Load1: 4.5}, Base: &runFigures{MsgsSec: 10000, Load1: 1.5}}}
	if l, err := compare("text", loaded, 0.10); err != nil || !strings.Contains(l.verdictLine(0.10, 2), "LOADED: load average up to 4.5 on 2 cores") {
		t.Fatalf("compare with a loaded run: %v, %q", err, l.verdictLine(0.10, 2))
	}
	if strings.Contains(ok.verdictLine(0.10, 2), "LOADED") {
		t.Fatalf("verdict line %q: no load recorded is not a load", ok.verdictLine(0.10, 2))
	}

	if _, err := compare("text", []roundRuns{{Round: 1, Raw: fig(1, 1), Head: fig(1, 1)}}, 0.10); err == nil {
		t.Fatal("compare without a baseline run: no error")
	}
}

func TestRoundsVerdict(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// bench-limits' pipeline writes a Batch and a COPY run; COPY is the raw limit.
	raw := `{"test":"d.pipeline","variant":"batch/quorum/b500/50ms/pf1000","n":100000,"secs":20,"msgs_per_s":5000,"cpu_go_pct":50,"cpu_rabbit_pct":50,"cpu_pg_pct":50}
{"test":"d.pipeline","variant":"copy/quorum/b500/50ms/pf1000","n":100000,"secs":10,"msgs_per_s":10000,"cpu_go_pct":40,"cpu_rabbit_pct":60,"cpu_pg_pct":50}
`
	for _, r := range []string{"1", "2", "3"} {
		write(r+"-raw.jsonl", raw)
		write(r+"-text-head.jsonl", `{"n":100000,"secs":10,"msgs_per_s":10000,"cpu_dlq_pct":40,"cpu_rabbit_pct":60,"cpu_pg_pct":50}`+"\n")
		write(r+"-text-base.jsonl", `{"n":100000,"secs":10,"msgs_per_s":10000,"cpu_dlq_pct":40,"cpu_rabbit_pct":60,"cpu_pg_pct":50}`+"\n")
		write(r+"-notext-head.jsonl", `{"n":100000,"secs":12.5,"msgs_per_s":8000,"cpu_dlq_pct":40,"cpu_rabbit_pct":60,"cpu_pg_pct":50}`+"\n")
		write(r+"-notext-base.jsonl", `{"n":100000,"secs":10,"msgs_per_s":10000,"cpu_dlq_pct":40,"cpu_rabbit_pct":60,"cpu_pg_pct":50}`+"\n")
	}
	write("log.txt", "not a round")
	settings, by, err := readRounds(dir)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(settings, ",") != "notext,text" || len(by["text"]) != 3 {
		t.Fatalf("settings %v, rounds %v", settings, by)
	}
	r := by["text"][0]
	if r.Raw == nil || !near(r.Raw.MsgsSec, 10000) || !near(r.Raw.UsProgram, 40) || !near(r.Raw.usTotal(), 150) {
		t.Fatalf("raw figures of round 1: %+v, want COPY's: 10000 msgs/s, 40 + 50 + 60 µs/msg", r.Raw)
	}
	if err := RoundsVerdict([]string{"-dir", dir}); !errors.Is(err, errSlower) || !strings.Contains(err.Error(), "notext") || strings.Contains(err.Error(), "text,") {
		t.Fatalf("RoundsVerdict = %v, want notext slower", err)
	}
	if err := RoundsVerdict([]string{"-dir", dir, "-threshold", "25"}); err != nil {
		t.Fatalf("RoundsVerdict with a 25%% threshold = %v, want nil", err)
	}
	os.Remove(filepath.Join(dir, "1-text-base.jsonl"))
	os.Remove(filepath.Join(dir, "2-text-base.jsonl"))
	os.Remove(filepath.Join(dir, "3-text-base.jsonl"))
	if err := RoundsVerdict([]string{"-dir", dir, "-threshold", "25"}); err == nil || !strings.Contains(err.Error(), "no verdict for text") {
		t.Fatalf("RoundsVerdict without text's baseline runs = %v, want no verdict", err)
	}
}
