package alerts

import (
	"encoding/json"
	"testing"
	"time"
)

// FuzzEvaluate feeds arbitrary histories to the state machine. Each byte is
// one evaluation: its bits choose the pending count of two queues, whether a
// queue is present, the capacity and the time step. Whatever the history,
// receivers must see firing and resolved alternate per pair, and the state
// must survive a JSON round trip unchanged.
func FuzzEvaluate(f *testing.F) {
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00})
	f.Add([]byte{0x13, 0x37, 0x00, 0x13, 0x37, 0x00, 0x13})
	f.Fuzz(func(t *testing.T, history []byte) {
		if len(history) == 0 {
			return
		}
		rs := DefaultRuleSet()
		rs.RepeatInterval = time.Duration(history[0]%4) * 10 * time.Minute
		var st State
		last := map[stateKey]Status{}
		at := t0
		for _, b := range history[1:] {
			at = at.Add(time.Duration(1+b>>6) * time.Minute)
			snap := Snapshot{At: at, Capacity: CapacityStats{Messages: int64(b & 0x3f), MaxMessages: 63}}
			if b&1 != 0 {
				snap.Queues = append(snap.Queues, QueueStats{SourceQueue: "a", Pending: int64(b>>1&3) * 60, NewLast5m: int64(b>>3&1) * 2000})
			}
			if b&2 != 0 {
				snap.Queues = append(snap.Queues, QueueStats{SourceQueue: "b", Pending: int64(b>>4&1) * 200, RepeatFailures: int64(b >> 5 & 1)})
			}
			next, notes := Evaluate(st, snap, rs)
			for _, a := range notes {
				k := stateKey{a.Rule, a.SourceQueue, a.Subject}
				if a.Status == StatusResolved && last[k] != StatusFiring {
					t.Fatalf("resolved %v without a firing before it", k)
				}
				if a.Status == StatusFiring && last[k] == StatusFiring && rs.RepeatInterval == 0 {
					t.Fatalf("%v notified firing twice without repeats", k)
				}
				last[k] = a.Status
			}
			b1, err := json.Marshal(next)
			if err != nil {
				t.Fatal(err)
			}
			var back State
			if err := json.Unmarshal(b1, &back); err != nil {
				t.Fatal(err)
			}
			b2, _ := json.Marshal(back)
			if string(b1) != string(b2) {
				t.Fatalf("state changed in a JSON round trip:\n%s\n%s", b1, b2)
			}
			st = back
		}
	})
}
