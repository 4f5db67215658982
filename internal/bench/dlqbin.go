package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// buildDlq builds the dlq binary into a temporary folder; clean removes it.
func buildDlq() (bin string, clean func(), err error) {
	dir, err := os.MkdirTemp("", "dlq-bench-")
	if err != nil {
		return "", nil, err
	}
	bin = filepath.Join(dir, "dlq")
	build := exec.Command("go", "build", "-o", bin, "github.com/dlq/dlq/cmd/dlq")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("build dlq: %w", err)
	}
	return bin, func() { _ = os.RemoveAll(dir) }, nil
}
