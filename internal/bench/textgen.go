package bench

import (
	"fmt"
	"math/rand/v2"
	"strconv"
)

// Text for the generated messages, so that text search (q across every
// queue) has words to find: a JSON body whose note is a few dozen words
// of a small vocabulary (common words, found in many messages), a
// customer name in a header (each name in about one message in 40,000),
// a stack trace on the null pointer failures, and rare needles.

// benchRarePhrase is in the note of one body in benchRareEvery: a
// selective phrase across every queue (its words are in no other body).
const (
	benchRarePhrase = "parcel quarantined by customs at Rotterdam"
	benchRareEvery  = 100_000
)

// benchRareFrame is in the stack of one null pointer failure in
// benchRareEvery.
const benchRareFrame = "com.shop.ledger.LedgerCompactor.compact(LedgerCompactor.java:311)"

var benchWords = []string{"order", "customer", "payment", "shipment", "invoice", "warehouse", "delivery", "address",
	"priority", "standard", "express", "return", "refund", "discount", "coupon", "gift", "wrap", "fragile", "handle",
	"with", "care", "leave", "at", "door", "call", "before", "arrival", "signature", "required", "weekend", "morning",
	"evening", "backorder", "partial", "split", "merge", "update", "cancel", "confirm", "pending", "review", "manual",
	"check", "stock", "level", "low", "high", "region", "north", "south", "east", "west", "central", "store", "pickup",
	"locker", "courier", "tracking", "label", "printed", "scanned", "loaded", "truck", "route", "driver", "note",
	"the", "a", "and", "of", "to", "for", "on", "in", "is", "was", "by", "from", "please", "thanks", "asap", "today",
	"tomorrow", "blue", "red", "green", "large", "small", "medium", "box", "bag", "pallet", "crate", "item", "items"}

var benchFirstNames = []string{"Alice", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hiroshi", "Ines",
	"Jonas", "Kaya", "Lars", "Mina", "Nico", "Olga", "Pavel", "Quinn", "Rosa", "Sven", "Tariq", "Uma", "Viktor",
	"Wanda", "Xavier", "Yara", "Zeno", "Amara", "Bjorn", "Carmen", "Dario", "Esme", "Felix", "Gianna", "Hugo",
	"Ivana", "Jakob", "Kofi", "Lena", "Marek", "Nadia", "Oskar", "Petra", "Rafael", "Saskia", "Tomas", "Ulla",
	"Vera", "Wim", "Yusuf", "Zofia"}

var benchLastNames = func() []string {
	out := make([]string, 800)
	syll := []string{"ber", "to", "man", "ski", "son", "ra", "vic", "li", "dor", "en", "ka", "mo", "ne", "sa", "tu", "vi",
		"lo", "ha", "ri", "go"}
	for i := range out {
		out[i] = string(rune('A'+i%26)) + syll[i%20] + syll[(i/20)%20] + syll[(i/400)%20]
	}
	return out
}()

// body returns message id's body: JSON with an order, a SKU (the body
// substring benchmarks look for "sku":"SKU-<n>") and a note of words.
func (g *rowGen) body(id int64) []byte {
	r := g.r
	b := make([]byte, 0, 512)
	b = append(b, `{"order":`...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, `,"sku":"SKU-`...)
	b = strconv.AppendInt(b, int64(r.IntN(100000)), 10)
	b = append(b, `","qty":`...)
	b = strconv.AppendInt(b, int64(1+r.IntN(9)), 10)
	b = append(b, `,"note":"`...)
	n := 20 + r.IntN(40)
	for i := range n {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, benchWords[int(r.ExpFloat64()*20)%len(benchWords)]...)
	}
	if r.IntN(benchRareEvery) == 0 {
		b = append(b, ' ')
		b = append(b, benchRarePhrase...)
	}
	b = append(b, `"}`...)
	return b
}

// benchStack is the stack of a null pointer failure.
func benchStack(r *rand.Rand) string {
	top := fmt.Sprintf("at com.shop.billing.InvoiceMapper.map(InvoiceMapper.java:%d)", 10+r.IntN(200))
	if r.IntN(benchRareEvery) == 0 {
		top = "at " + benchRareFrame
	}
	return "java.lang.NullPointerException\n\t" + top + "\n\tat com.shop.billing.InvoiceService.issue(InvoiceService.java:88)\n\tat com.shop.Worker.run(Worker.java:42)"
}
