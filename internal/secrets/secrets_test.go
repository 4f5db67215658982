package secrets

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func write(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	require.NoError(t, os.Chmod(p, mode))
	return p
}

func TestReadFile(t *testing.T) {
	t.Parallel()
	p := write(t, "s3cret\n", 0o600)
	s, err := ReadFile(p)
	require.NoError(t, err)
	require.Equal(t, "s3cret", s)

	p = write(t, "a\nb\r\n", 0o400)
	s, err = ReadFile(p)
	require.NoError(t, err)
	require.Equal(t, "a\nb", s)
}

func TestReadFileRefusesExposedFiles(t *testing.T) {
	t.Parallel()
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660, 0o606, 0o622} {
		p := write(t, "topsecret", mode)
		_, err := ReadFile(p)
		require.ErrorIs(t, err, ErrExposed, "mode %04o", mode)
		require.NotContains(t, err.Error(), "topsecret")
		require.Contains(t, err.Error(), p)
	}
	// Execute bits alone expose nothing.
	p := write(t, "x", 0o711)
	_, err := ReadFile(p)
	require.NoError(t, err)
}

func TestReadFileRefusesDirectoriesAndMissingFiles(t *testing.T) {
	t.Parallel()
	_, err := ReadFile(t.TempDir())
	require.ErrorContains(t, err, "not a regular file")
	_, err = ReadFile(filepath.Join(t.TempDir(), "none"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
