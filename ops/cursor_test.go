package ops

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/store"
)

func TestCursorRoundTrip(t *testing.T) {
	t.Parallel()
	for _, id := range []int64{1, 2, 1 << 40, 1<<63 - 1} {
		c := encodeCursor(id, "pending\x00orders")
		got, err := decodeCursor(c, "pending\x00orders")
		require.NoError(t, err)
		require.Equal(t, id, got)
		_, err = decodeCursor(c, "pending\x00billing")
		require.ErrorIs(t, err, errBadCursor, "a cursor belongs to its query")
	}
}

func TestCursorRejectsDamage(t *testing.T) {
	t.Parallel()
	c := encodeCursor(12345, "q")
	raw, err := base64.RawURLEncoding.DecodeString(c)
	require.NoError(t, err)
	for i := range raw {
		for bit := range 8 {
			d := append([]byte(nil), raw...)
			d[i] ^= 1 << bit
			_, err := decodeCursor(base64.RawURLEncoding.EncodeToString(d), "q")
			require.ErrorIs(t, err, errBadCursor, "byte %d bit %d flipped", i, bit)
		}
	}
	// The same bytes spelled with stray trailing bits are not this cursor.
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, c[len(c)-1])
	loose := c[:len(c)-1] + string(alphabet[last^1])
	for _, s := range []string{loose, "", "AAAA", c + "A", c[:len(c)-1], "!!!!!!!!!!!!!!!!!!!!!!!", encodeCursor(0, "q"), encodeCursor(-5, "q")} {
		_, err := decodeCursor(s, "q")
		require.ErrorIs(t, err, errBadCursor, "%q", s)
	}
}

// FuzzCursor: decoding never panics, and whatever decodes re-encodes to
// the same cursor with a positive id.
func FuzzCursor(f *testing.F) {
	f.Add(encodeCursor(1, ""), "")
	f.Add(encodeCursor(987654321, "pending\x00orders"), "pending\x00orders")
	f.Add("AAAAAAAAAAAAAAAAAAAAAAA", "x")
	f.Add("not a cursor", "")
	f.Fuzz(func(t *testing.T, s, query string) {
		id, err := decodeCursor(s, query)
		if err != nil {
			return
		}
		if id <= 0 {
			t.Fatalf("decoded non-positive id %d from %q", id, s)
		}
		if again := encodeCursor(id, query); again != s {
			t.Fatalf("cursor %q decodes to %d, which encodes to %q", s, id, again)
		}
	})
}

// TestSortCursorRoundTrip: a sorted listing's cursor gives back its whole
// key, belongs to its query, and refuses any damage.
func TestSortCursorRoundTrip(t *testing.T) {
	t.Parallel()
	k := store.SortKey{ID: 42, FailedAt: time.Date(2024, 5, 1, 2, 3, 4, 567000, time.UTC), Queue: "orders.é"}
	c := encodeSortCursor(k, "q\x00sort=failed")
	got, err := decodeSortCursor(c, "q\x00sort=failed")
	require.NoError(t, err)
	require.Equal(t, k, got)
	_, err = decodeSortCursor(c, "q\x00sort=queue")
	require.ErrorIs(t, err, errBadCursor, "a cursor belongs to its query and sort")
	_, err = decodeCursor(c, "q\x00sort=failed")
	require.ErrorIs(t, err, errBadCursor, "not a newest-first cursor")
	raw, err := base64.RawURLEncoding.DecodeString(c)
	require.NoError(t, err)
	for i := range raw {
		d := append([]byte(nil), raw...)
		d[i] ^= 4
		_, err := decodeSortCursor(base64.RawURLEncoding.EncodeToString(d), "q\x00sort=failed")
		require.ErrorIs(t, err, errBadCursor, "byte %d changed", i)
	}
	for _, s := range []string{"", "AAAA", encodeCursor(5, "q\x00sort=failed"), c[:len(c)-2]} {
		_, err := decodeSortCursor(s, "q\x00sort=failed")
		require.ErrorIs(t, err, errBadCursor, "%q", s)
	}
}

// FuzzSortCursor: decoding never panics, and whatever decodes re-encodes
// to the same cursor.
func FuzzSortCursor(f *testing.F) {
	f.Add(encodeSortCursor(store.SortKey{ID: 1, Queue: "q"}, ""), "")
	f.Add(encodeSortCursor(store.SortKey{ID: 99, FailedAt: time.Unix(1700000000, 0)}, "x"), "x")
	f.Add("AAAAAAAAAAAAAAAAAAAAAAA", "x")
	f.Fuzz(func(t *testing.T, s, query string) {
		k, err := decodeSortCursor(s, query)
		if err != nil {
			return
		}
		if k.ID <= 0 {
			t.Fatalf("decoded non-positive id %d from %q", k.ID, s)
		}
		if again := encodeSortCursor(k, query); again != s {
			t.Fatalf("%q decodes to %+v, which encodes to %q", s, k, again)
		}
	})
}
