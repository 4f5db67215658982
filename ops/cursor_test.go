package ops

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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
