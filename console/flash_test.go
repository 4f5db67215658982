package console

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A flash reads back only with its session's key, before it expires, and
// with links to console pages only; a long one is cut to fit a cookie,
// its links kept.
func TestFlashCookie(t *testing.T) {
	now := time.Now()
	key, other := flashKey("session-a"), flashKey("session-b")
	f := say(flashWaiting, "Waiting for approval by admin: ", approvalLink(7), ".")
	v, ok := encodeFlash(key, f, now)
	require.True(t, ok)
	got := decodeFlash(key, v, now.Add(time.Second))
	require.NotNil(t, got)
	require.Equal(t, flashWaiting, got.Kind)
	require.Equal(t, f.Parts, got.Parts)
	require.Equal(t, "Waiting:", got.Label())

	require.Nil(t, decodeFlash(other, v, now), "another session's key")
	require.Nil(t, decodeFlash(key, v, now.Add(2*flashTTL)), "expired")
	require.Nil(t, decodeFlash(key, v[:len(v)-2]+"xx", now), "tampered")
	require.Nil(t, decodeFlash(key, "garbage", now))

	evil, ok := encodeFlash(key, say(flashDone, flashPart{Text: "x", Href: "https://evil.example/"}), now)
	require.True(t, ok)
	require.Nil(t, decodeFlash(key, evil, now), "a link off the console is refused")

	long := say(flashError, strings.Repeat("é", 5000), taskLink(3))
	v, ok = encodeFlash(key, long, now)
	require.True(t, ok)
	require.LessOrEqual(t, len(v), maxFlashBytes+50)
	got = decodeFlash(key, v, now)
	require.NotNil(t, got)
	require.Equal(t, taskLink(3), got.Parts[1], "the link is kept")
	require.True(t, strings.HasSuffix(got.Parts[0].Text, "…"))
	require.True(t, got.IsError())
}
