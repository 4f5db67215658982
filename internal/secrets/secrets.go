// Package secrets reads secrets from files, as container platforms hand
// them over (Docker and Kubernetes secrets, systemd credentials): the
// *_FILE settings of dlq.
//
// A secret file must be private to its owner: a file that other users may
// read or write is refused, naming the file and its mode, never its
// content. Docker Compose (`mode: 0400` in a secret's long syntax) and
// Kubernetes (`defaultMode: 0400`) can both mount secrets that way.
package secrets

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// ErrExposed is returned for a secret file that users other than its
// owner may read or write.
var ErrExposed = errors.New("secret file is readable or writable by other users")

// maxSize bounds a secret file: a key list or a token, never more.
const maxSize = 1 << 20

// ReadFile returns the content of the secret file at path, with one
// trailing newline (as editors and `echo` write it) removed. It refuses a
// file whose mode gives group or others any read or write permission, a
// file that is not a regular file, and a file larger than 1 MiB.
func ReadFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("secret file %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("secret file %s: %w", path, err)
	}
	if err := CheckMode(path, st.Mode()); err != nil {
		return "", err
	}
	if st.Size() > maxSize {
		return "", fmt.Errorf("secret file %s: %d bytes is more than a secret (at most %d)", path, st.Size(), maxSize)
	}
	b := make([]byte, st.Size())
	n, err := f.Read(b)
	if err != nil && n != len(b) {
		return "", fmt.Errorf("secret file %s: %w", path, err)
	}
	s := string(b[:n])
	s = strings.TrimSuffix(s, "\n")
	s = strings.TrimSuffix(s, "\r")
	return s, nil
}

// CheckMode refuses a mode that is not a regular file's, or that gives
// group or others read or write permission.
func CheckMode(path string, mode fs.FileMode) error {
	if !mode.IsRegular() {
		return fmt.Errorf("secret file %s: not a regular file (%s)", path, mode.Type())
	}
	if perm := mode.Perm(); perm&0o066 != 0 {
		return fmt.Errorf("secret file %s has mode %04o: %w; make it private to the user dlq runs as (chmod 600 %s, or mode 0400 for a container secret)",
			path, perm, ErrExposed, path)
	}
	return nil
}
