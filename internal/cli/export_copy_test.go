package cli

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// copyExport keeps every complete line, counts the messages, and tells a
// finished export (its end line came) from a cut one.
func TestCopyExport(t *testing.T) {
	t.Parallel()
	const (
		m1  = `{"id":12,"body_base64":"aGk="}`
		m2  = `{"id":11,"body_base64":"aG8="}`
		end = `{"export":{"messages":2}}`
	)

	t.Run("finished", func(t *testing.T) {
		var out bytes.Buffer
		n, last, done, err := copyExport(&out, strings.NewReader(m1+"\n"+m2+"\n"+end+"\n"), nil)
		require.NoError(t, err)
		require.True(t, done)
		require.Equal(t, int64(2), n)
		require.Equal(t, int64(11), last)
		require.Equal(t, m1+"\n"+m2+"\n"+end+"\n", out.String())
	})

	t.Run("the end line without its newline still ends it", func(t *testing.T) {
		var out bytes.Buffer
		_, _, done, err := copyExport(&out, strings.NewReader(m1+"\n"+end), nil)
		require.True(t, done)
		require.ErrorIs(t, err, io.EOF)
		require.Equal(t, m1+"\n"+end+"\n", out.String())
	})

	t.Run("cut in the middle of a line", func(t *testing.T) {
		var out bytes.Buffer
		n, last, done, err := copyExport(&out, strings.NewReader(m1+"\n"+m2[:10]), nil)
		require.False(t, done)
		require.ErrorIs(t, err, io.EOF)
		require.Equal(t, int64(1), n)
		require.Equal(t, int64(12), last, "the cursor to continue after")
		require.Equal(t, m1+"\n", out.String(), "the half line is not written")
	})

	t.Run("a line that is no export's stops the copy", func(t *testing.T) {
		var out bytes.Buffer
		n, _, done, err := copyExport(&out, strings.NewReader(m1+"\n<html>502 Bad Gateway</html>\n"+m2+"\n"), nil)
		require.NoError(t, err)
		require.False(t, done)
		require.Equal(t, int64(1), n)
		require.Equal(t, m1+"\n", out.String())
	})

	t.Run("a failed write is the writer's error", func(t *testing.T) {
		f, err := os.Create(filepath.Join(t.TempDir(), "export.ndjson"))
		require.NoError(t, err)
		require.NoError(t, f.Close())
		_, _, done, err := copyExport(f, strings.NewReader(m1+"\n"+end+"\n"), nil)
		require.False(t, done)
		var werr *exportWriteError
		require.True(t, errors.As(err, &werr), "%v", err)
		require.ErrorIs(t, werr.err, os.ErrClosed)
	})
}

// resumeExportFile cuts an interrupted export after its last complete line.
func TestResumeExportFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cut := filepath.Join(dir, "cut.ndjson")
	require.NoError(t, os.WriteFile(cut, []byte(`{"id":12}`+"\n"+`{"id":11}`+"\n"+`{"id":1`), 0o644))
	after, complete, err := resumeExportFile(cut)
	require.NoError(t, err)
	require.False(t, complete)
	require.Equal(t, int64(11), after)
	got, err := os.ReadFile(cut)
	require.NoError(t, err)
	require.Equal(t, `{"id":12}`+"\n"+`{"id":11}`+"\n", string(got))

	whole := filepath.Join(dir, "whole.ndjson")
	body := `{"id":12}` + "\n" + `{"export":{"messages":1}}` + "\n"
	require.NoError(t, os.WriteFile(whole, []byte(body), 0o644))
	_, complete, err = resumeExportFile(whole)
	require.NoError(t, err)
	require.True(t, complete)
	got, err = os.ReadFile(whole)
	require.NoError(t, err)
	require.Equal(t, body, string(got), "a finished export is left as it is")

	after, complete, err = resumeExportFile(filepath.Join(dir, "none.ndjson"))
	require.NoError(t, err, "no file yet: start from the beginning")
	require.False(t, complete)
	require.Zero(t, after)
}
