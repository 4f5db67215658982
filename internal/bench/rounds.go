package bench

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// `dlq-bench rounds-verdict`: the guard of scripts/bench-ingest-rounds.sh.
// Each round of that script measures bench-limits' raw COPY pipeline, then
// dlq-bench ingest built from HEAD and from a baseline revision, for each
// setting (text search on or off, encryption); the files of a round are
//
//	<dir>/<round>-raw.jsonl              bench-limits (its d.pipeline copy run)
//	<dir>/<round>-<setting>-head.jsonl   dlq-bench ingest, HEAD
//	<dir>/<round>-<setting>-base.jsonl   dlq-bench ingest, the baseline
//
// Within a round both builds are divided by the same raw run, so the
// quotient of their ratios is HEAD's msgs/s over the baseline's in the
// same minutes: the verdict is the median of that over the rounds.

// runFigures are one run's throughput and CPU time per message.
type runFigures struct {
	MsgsSec float64
	// CPU time per message in microseconds: the measured program (dlq or
	// bench-limits), PostgreSQL's processes and RabbitMQ's.
	UsProgram, UsPg, UsRabbit float64
	// Load1 is the load average as the run started (0: not recorded, as
	// by bench-limits and older builds).
	Load1 float64
}

func (f runFigures) usTotal() float64 { return f.UsProgram + f.UsPg + f.UsRabbit }

// jsonRun holds the fields read from a line of either program's results.
type jsonRun struct {
	Test      string  `json:"test"`
	Variant   string  `json:"variant"`
	N         int     `json:"n"`
	Secs      float64 `json:"secs"`
	MsgsSec   float64 `json:"msgs_per_s"`
	CPUGo     float64 `json:"cpu_go_pct"`
	CPUDlq    float64 `json:"cpu_dlq_pct"`
	CPUPg     float64 `json:"cpu_pg_pct"`
	CPURabbit float64 `json:"cpu_rabbit_pct"`
	Load1     float64 `json:"load_avg"`
}

func (j jsonRun) figures() runFigures {
	return runFigures{
		MsgsSec:   j.MsgsSec,
		UsProgram: usPerMsg(j.CPUGo+j.CPUDlq, j.Secs, j.N),
		UsPg:      usPerMsg(j.CPUPg, j.Secs, j.N),
		UsRabbit:  usPerMsg(j.CPURabbit, j.Secs, j.N),
		Load1:     j.Load1,
	}
}

// roundRuns is one round of one setting; a run that failed is nil.
type roundRuns struct {
	Round           int
	Raw, Head, Base *runFigures
}

// comparison is the verdict of one setting over its rounds.
type comparison struct {
	Setting string
	// Rounds counts the rounds with raw, HEAD and baseline figures.
	Rounds int
	// HeadRatio and BaseRatio are the medians of each build's msgs/s over
	// the raw pipeline's in the same round.
	HeadRatio, BaseRatio float64
	// Change is the median over the rounds of (HEAD/raw)/(baseline/raw),
	// minus 1: -0.12 is HEAD 12% slower than the baseline.
	Change float64
	// Changes are the rounds' (HEAD/raw)/(baseline/raw) minus 1, in order.
	Changes []float64
	// HeadUs and BaseUs are the medians of the total CPU time per message
	// (dlq, PostgreSQL, RabbitMQ); UsChange the median over the rounds of
	// HEAD's over the baseline's, minus 1.
	HeadUs, BaseUs, UsChange float64
	// MaxLoad is the highest load average recorded as a run started.
	MaxLoad float64
	// Slower: Change fell below -threshold (the exit rule). Costlier:
	// UsChange rose above +threshold (reported, not an exit).
	Slower, Costlier bool
}

// compare computes the verdict of one setting; threshold is a fraction
// (0.10 for 10%). Rounds missing a run are left out; none left is an error.
func compare(setting string, rounds []roundRuns, threshold float64) (comparison, error) {
	c := comparison{Setting: setting}
	var head, base, change, headUs, baseUs, usChange []float64
	for _, r := range rounds {
		if r.Raw == nil || r.Head == nil || r.Base == nil || r.Raw.MsgsSec <= 0 || r.Base.MsgsSec <= 0 {
			continue
		}
		h, b := r.Head.MsgsSec/r.Raw.MsgsSec, r.Base.MsgsSec/r.Raw.MsgsSec
		head, base = append(head, h), append(base, b)
		change = append(change, h/b-1)
		headUs, baseUs = append(headUs, r.Head.usTotal()), append(baseUs, r.Base.usTotal())
		c.MaxLoad = max(c.MaxLoad, r.Head.Load1, r.Base.Load1)
		if r.Base.usTotal() > 0 {
			usChange = append(usChange, r.Head.usTotal()/r.Base.usTotal()-1)
		}
	}
	if len(change) == 0 {
		return c, fmt.Errorf("%s: no round has a raw, a HEAD and a baseline run", setting)
	}
	c.Rounds, c.Changes = len(change), change
	c.HeadRatio, c.BaseRatio, c.Change = median(head), median(base), median(change)
	c.HeadUs, c.BaseUs, c.UsChange = median(headUs), median(baseUs), median(usChange)
	c.Slower = c.Change < -threshold
	c.Costlier = len(usChange) > 0 && c.UsChange > threshold
	return c, nil
}

// verdictLine is the line a reader looks for: PASS or FAIL and why, on a
// machine of cpus cores.
func (c comparison) verdictLine(threshold float64, cpus int) string {
	word := "PASS"
	if c.Slower {
		word = "FAIL"
	}
	rounds := make([]string, len(c.Changes))
	for i, x := range c.Changes {
		rounds[i] = fmt.Sprintf("%+.0f%%", x*100)
	}
	s := fmt.Sprintf("VERDICT %s %s: HEAD/raw %.2f vs baseline/raw %.2f over %d rounds, median change %+.1f%% (rounds %s; limit -%.0f%%); CPU/msg %.1f vs %.1f µs, %+.1f%%",
		word, c.Setting, c.HeadRatio, c.BaseRatio, c.Rounds, c.Change*100, strings.Join(rounds, " "), threshold*100, c.HeadUs, c.BaseUs, c.UsChange*100)
	if c.Costlier {
		s += fmt.Sprintf(" (WARNING: CPU per message rose more than %.0f%%)", threshold*100)
	}
	if c.MaxLoad > float64(cpus) {
		s += fmt.Sprintf(" (LOADED: load average up to %.1f on %d cores as runs started: other work moves msgs/s by tens of percent)", c.MaxLoad, cpus)
	}
	if c.noisy(threshold) {
		s += " (NOISY: rounds on both sides of ±threshold; the median of so few says little: more ROUNDS, a quieter machine, and the CPU per message)"
	}
	return s
}

// noisy reports rounds beyond the threshold on both sides: two builds
// whose adjacent runs differ that much both ways are measured by the
// machine's load more than by their code (an A/A run of one build on a
// loaded machine does this).
func (c comparison) noisy(threshold float64) bool {
	return len(c.Changes) > 1 && slices.Min(c.Changes) < -threshold && slices.Max(c.Changes) > threshold
}

var roundFile = regexp.MustCompile(`^(\d+)-(raw|([\w.]+)-(head|base))\.jsonl$`)

// readRounds reads a rounds directory: the settings, sorted, and the
// rounds of each.
func readRounds(dir string) (settings []string, bySetting map[string][]roundRuns, err error) {
	names, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("read rounds directory: %w", err)
	}
	raw := map[int]*runFigures{}
	type key struct {
		round   int
		setting string
	}
	runs := map[key]*roundRuns{}
	for _, e := range names {
		m := roundFile.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		round, _ := strconv.Atoi(m[1])
		lines, err := readJSONLines(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, nil, err
		}
		if m[2] == "raw" {
			// bench-limits -tests pipeline runs Batch and COPY; the raw
			// limit is COPY's.
			for _, l := range lines {
				if l.Test == "d.pipeline" && strings.HasPrefix(l.Variant, "copy") {
					f := l.figures()
					raw[round] = &f
				}
			}
			continue
		}
		k := key{round, m[3]}
		if runs[k] == nil {
			runs[k] = &roundRuns{Round: round}
			if !slices.Contains(settings, m[3]) {
				settings = append(settings, m[3])
			}
		}
		if len(lines) == 0 {
			continue
		}
		f := lines[len(lines)-1].figures()
		if m[4] == "head" {
			runs[k].Head = &f
		} else {
			runs[k].Base = &f
		}
	}
	bySetting = map[string][]roundRuns{}
	for k, r := range runs {
		r.Raw = raw[k.round]
		bySetting[k.setting] = append(bySetting[k.setting], *r)
	}
	for _, rs := range bySetting {
		slices.SortFunc(rs, func(a, b roundRuns) int { return a.Round - b.Round })
	}
	slices.Sort(settings)
	return settings, bySetting, nil
}

func readJSONLines(path string) ([]jsonRun, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []jsonRun
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var j jsonRun
		if err := json.Unmarshal(sc.Bytes(), &j); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, j)
	}
	return out, sc.Err()
}

// errSlower is what rounds-verdict returns when a setting regressed: the
// exit status of make bench-ingest-rounds.
var errSlower = errors.New("HEAD ingests slower than the baseline beyond the threshold")

// RoundsVerdict runs `dlq-bench rounds-verdict -dir <rounds dir>`: one
// VERDICT line per setting, and an error (exit status 1) when any setting
// is slower than the baseline by more than -threshold percent.
func RoundsVerdict(args []string) error {
	fs := flag.NewFlagSet("dlq-bench rounds-verdict", flag.ContinueOnError)
	dir := fs.String("dir", "", "rounds directory of scripts/bench-ingest-rounds.sh (<round>-raw.jsonl, <round>-<setting>-head.jsonl, <round>-<setting>-base.jsonl)")
	pct := fs.Float64("threshold", 10, "percent: fail when the median of HEAD's ratio to raw over the baseline's drops more than this; warn when CPU per message rises more than this")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("-dir is required")
	}
	if *pct <= 0 {
		return fmt.Errorf("-threshold must be positive, got %g", *pct)
	}
	settings, bySetting, err := readRounds(*dir)
	if err != nil {
		return err
	}
	threshold := *pct / 100
	if len(settings) == 0 {
		return fmt.Errorf("no dlq-bench runs in %s", *dir)
	}
	var slower, undecided []string
	for _, s := range settings {
		c, err := compare(s, bySetting[s], threshold)
		if err != nil {
			// A guard that passes when its runs failed guards nothing.
			fmt.Printf("VERDICT NONE %v\n", err)
			undecided = append(undecided, s)
			continue
		}
		fmt.Println(c.verdictLine(threshold, runtime.NumCPU()))
		if c.Slower {
			slower = append(slower, s)
		}
	}
	switch {
	case len(slower) > 0:
		return fmt.Errorf("%w (%.0f%%): %s", errSlower, *pct, strings.Join(slower, ", "))
	case len(undecided) > 0:
		return fmt.Errorf("no verdict for %s: runs missing (see the log)", strings.Join(undecided, ", "))
	}
	return nil
}
