package bench

import (
	"bytes"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/dlq/dlq/broker"
)

// Generated rows are stored as ingest stores a dead letter: the x-death
// header in the death record only, put back on read. A generator that
// kept it in the headers would spare the console benchmark the rebuild
// every read of an ingested row pays.
func TestGeneratedRowsStoreDeathHeaderOnce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	g := &rowGen{r: r, n: 2000, start: time.Now().Add(-30 * 24 * time.Hour), span: 30 * 24 * time.Hour,
		groups: map[groupKey]int64{}, groupsMu: &sync.Mutex{}, zipf: rand.NewZipf(r, 1.1, 1, uint64(len(benchQueues)-1))}
	for i := range 2000 {
		row, headers, death := g.message(i)
		stored := row[12].([]byte)
		xDeath := row[genXDeath].([]byte)
		if death.Empty() {
			t.Fatalf("row %d: headers stored whole: %s", i, headers)
		}
		if bytes.Contains(stored, []byte(`"x-death"`)) {
			t.Fatalf("row %d: stored headers keep x-death: %s", i, stored)
		}
		if !bytes.Contains(headers, []byte(`"x-death"`)) {
			t.Fatalf("row %d: the dead letter's headers have no x-death: %s", i, headers)
		}
		if got := broker.RestoreDeathHeader(stored, xDeath); !bytes.Equal(got, headers) {
			t.Fatalf("row %d: restored\n%s\nwant\n%s", i, got, headers)
		}
	}
}
