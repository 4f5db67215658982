package console

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/replay"
)

// TestSelectionOnUnknown: the replay form's "if a publish's outcome is
// unknown" travels from the form to the confirmation's query and into the
// request; anything but retry, hold or empty is refused in the form's words.
func TestSelectionOnUnknown(t *testing.T) {
	for _, c := range []struct{ in, want string }{{"", ""}, {"retry", replay.OnUnknownRetry}, {"hold", replay.OnUnknownHold}} {
		s, err := readSelection(url.Values{"action": {actReplay}, "id": {"7"}, "on_unknown": {c.in}})
		require.NoError(t, err, c.in)
		again, err := readSelection(s.values())
		require.NoError(t, err, c.in)
		req, err := again.replayRequest(false)
		require.NoError(t, err)
		require.Equal(t, c.want, req.Request.OnUnknown, c.in)
	}
	_, err := readSelection(url.Values{"action": {actReplay}, "id": {"7"}, "on_unknown": {"twice"}})
	require.ErrorContains(t, err, "If a publish's outcome is unknown: choose send it again or hold it")
}
