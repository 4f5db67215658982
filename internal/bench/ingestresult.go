package bench

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// ingestResult is one measured drain.
type ingestResult struct {
	Bench      string  `json:"bench"`
	Mode       string  `json:"mode"`
	QueueType  string  `json:"queue_type"`
	DeadLetter string  `json:"dead_letter"`
	Size       int     `json:"size"`
	N          int     `json:"n"`
	Run        int     `json:"run"`
	Secs       float64 `json:"secs"`
	MsgsSec    float64 `json:"msgs_per_s"`
	MBSec      float64 `json:"mb_per_s"`
	// StartupSecs is how long dlq serve took from its start to its first
	// consumer on the queue (process mode), and MsgsSecSubscribed the drain
	// rate from there: the raw program's clock starts at its subscription,
	// so this is the like-for-like figure, MsgsSec the one a user waiting
	// on a restarted dlq sees.
	StartupSecs       float64 `json:"startup_secs,omitempty"`
	MsgsSecSubscribed float64 `json:"msgs_per_s_subscribed,omitempty"`
	// CPU in percent of one core over the drain: dlq (this process in
	// inproc mode, the dlq serve process in process mode), RabbitMQ and
	// PostgreSQL (every process of their users).
	CPUDlq    float64 `json:"cpu_dlq_pct"`
	CPURabbit float64 `json:"cpu_rabbit_pct"`
	CPUPg     float64 `json:"cpu_pg_pct"`
	// CPU time per message in microseconds, the same three and their sum:
	// steadier than msgs/s on a loaded machine, and what a saving shows in
	// first (bench-limits' runs get the same figures in
	// scripts/bench-summary.py and rounds-verdict).
	UsPerMsgDlq    float64 `json:"us_per_msg_dlq"`
	UsPerMsgPg     float64 `json:"us_per_msg_pg"`
	UsPerMsgRabbit float64 `json:"us_per_msg_rabbit"`
	UsPerMsgTotal  float64 `json:"us_per_msg_total"`
	// PeakRSSMB is the dlq serve process's VmHWM (process mode only).
	PeakRSSMB   float64 `json:"peak_rss_mb,omitempty"`
	PrefillSecs float64 `json:"prefill_secs"`
	// Load1 is the 1-minute load average as the drain started: above the
	// core count, other work shares the machine and msgs/s moves with it
	// (rounds-verdict says so).
	Load1 float64 `json:"load_avg"`
	// BatchMs and BatchMsgs are the mean time to write and commit one batch
	// and its mean size (inproc mode, from dlq's own histograms).
	BatchMs   float64 `json:"batch_ms,omitempty"`
	BatchMsgs float64 `json:"batch_msgs,omitempty"`
	// WALBytesPerMsg is the WAL PostgreSQL wrote during the drain per
	// message: the row, its index entries, and what else ran (the text
	// indexer, the server's own); bench-limits reports its WAL too.
	WALBytesPerMsg float64 `json:"wal_bytes_per_msg"`
	// WithoutIndexes lists indexes dropped for a diagnostic run.
	WithoutIndexes []string `json:"without_indexes,omitempty"`
	// Encrypted: encryption at rest on (a random key, every header sealed).
	Encrypted bool `json:"encrypted"`
	// TextSearch: text search on, the text indexer running beside ingest
	// at its default pacing (as dlq serve runs by default).
	TextSearch bool `json:"text_search"`
	// SearchNewestSecs is how long after the drain a text search (q) for a
	// word of the newest message's body first listed it (-text bodies with
	// text search on; -1: not found within searchNewestWait).
	SearchNewestSecs *float64 `json:"search_newest_secs,omitempty"`
	// TextCaughtUpSecs is how long after the drain the text indexer had
	// every stored message's document (text search on; -1: not within
	// searchNewestWait).
	TextCaughtUpSecs *float64 `json:"text_caught_up_secs,omitempty"`
	Consumers        int      `json:"consumers"`
	Prefetch         int      `json:"prefetch"`
	BatchSize        int      `json:"batch_size"`
	Linger           string   `json:"linger"`
}

func printResult(r ingestResult) {
	rss := ""
	if r.PeakRSSMB > 0 {
		rss = fmt.Sprintf(" peak_rss=%.0fMB", r.PeakRSSMB)
	}
	batch := ""
	if r.BatchMsgs > 0 {
		batch = fmt.Sprintf(" batch=%.0fmsgs/%.1fms", r.BatchMsgs, r.BatchMs)
	}
	if len(r.WithoutIndexes) > 0 {
		batch += " WITHOUT " + strings.Join(r.WithoutIndexes, ",")
	}
	if r.StartupSecs > 0 {
		batch += fmt.Sprintf(" startup=%.0fms msgs/s_from_subscribed=%.0f", r.StartupSecs*1000, r.MsgsSecSubscribed)
	}
	if r.Encrypted {
		batch += " ENCRYPTED"
	}
	if r.SearchNewestSecs != nil {
		batch += fmt.Sprintf(" search_newest=%.1fs", *r.SearchNewestSecs)
	}
	if r.TextCaughtUpSecs != nil {
		batch += fmt.Sprintf(" text_caught_up=%.1fs", *r.TextCaughtUpSecs)
	}
	if !r.TextSearch {
		batch += " TEXT-SEARCH-OFF"
	}
	batch += fmt.Sprintf(" wal=%.0fB/msg", r.WALBytesPerMsg)
	fmt.Printf("RESULT ingest %s/%s/%s/%dB run=%d n=%d secs=%.2f msgs/s=%.0f MB/s=%.1f cpu dlq=%.0f%% rabbit=%.0f%% pg=%.0f%% us/msg dlq=%.1f pg=%.1f rabbit=%.1f total=%.1f%s%s (prefill %.1fs)\n",
		r.Mode, r.QueueType, r.DeadLetter, r.Size, r.Run, r.N, r.Secs, r.MsgsSec, r.MBSec, r.CPUDlq, r.CPURabbit, r.CPUPg,
		r.UsPerMsgDlq, r.UsPerMsgPg, r.UsPerMsgRabbit, r.UsPerMsgTotal, rss, batch, r.PrefillSecs)
}

// printIngestSummary prints a markdown table: median, min and max msgs/s
// per body size, with the median run's CPU split.
func printIngestSummary(rs []ingestResult) {
	fmt.Println()
	fmt.Println("| mode | queue | dead letters | body | encryption | n | runs | msgs/s median (min–max) | MB/s | CPU dlq / rabbit / pg | µs/msg dlq / pg / rabbit / total | peak RSS |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	type group struct {
		size int
		enc  bool
	}
	bySize := map[group][]ingestResult{}
	var sizes []group
	for _, r := range rs {
		k := group{r.Size, r.Encrypted}
		if _, ok := bySize[k]; !ok {
			sizes = append(sizes, k)
		}
		bySize[k] = append(bySize[k], r)
	}
	for _, k := range sizes {
		s := k.size
		g := slices.Clone(bySize[k])
		slices.SortFunc(g, func(a, b ingestResult) int { return cmp.Compare(a.MsgsSec, b.MsgsSec) })
		med := g[len(g)/2]
		rss := "–"
		if med.PeakRSSMB > 0 {
			peak := 0.0
			for _, r := range g {
				peak = max(peak, r.PeakRSSMB)
			}
			rss = fmt.Sprintf("%.0f MB", peak)
		}
		enc := "off"
		if k.enc {
			enc = "on"
		}
		// CPU per message: the median of each figure over the runs (not
		// the median run's), as the rounds report it.
		us := func(f func(ingestResult) float64) float64 {
			xs := make([]float64, len(g))
			for i, r := range g {
				xs[i] = f(r)
			}
			return median(xs)
		}
		fmt.Printf("| %s | %s | %s | %d B | %s | %d | %d | %.0f (%.0f–%.0f) | %.1f | %.0f%% / %.0f%% / %.0f%% | %.1f / %.1f / %.1f / %.1f | %s |\n",
			med.Mode, med.QueueType, med.DeadLetter, s, enc, med.N, len(g), med.MsgsSec, g[0].MsgsSec, g[len(g)-1].MsgsSec, med.MBSec,
			med.CPUDlq, med.CPURabbit, med.CPUPg,
			us(func(r ingestResult) float64 { return r.UsPerMsgDlq }), us(func(r ingestResult) float64 { return r.UsPerMsgPg }),
			us(func(r ingestResult) float64 { return r.UsPerMsgRabbit }), us(func(r ingestResult) float64 { return r.UsPerMsgTotal }), rss)
	}
}
