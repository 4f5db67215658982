// Package exportline reads the lines of an export (JSON Lines) with one
// bound on a line's length, so that the API that imports an export and
// the CLI that writes and sends one agree on what is too long.
package exportline

import (
	"bufio"
	"errors"
	"fmt"
)

// Max bounds one line: a message of RabbitMQ's largest size (128 MiB by
// default), base64-encoded, with room for its headers.
const Max = 256 << 20

// ErrTooLong is Read's error for a line longer than Max.
var ErrTooLong = fmt.Errorf("a line is longer than %d bytes", Max)

// Read appends the next line of r, without its newline, to buf. At the
// end of r it returns io.EOF, with a last line that had no newline in
// buf; for a line longer than Max, ErrTooLong with what it had read.
func Read(r *bufio.Reader, buf []byte) ([]byte, error) {
	for {
		chunk, err := r.ReadSlice('\n')
		if len(buf)+len(chunk) > Max {
			return buf, ErrTooLong
		}
		buf = append(buf, chunk...)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err != nil:
			return buf, err
		}
		return buf[:len(buf)-1], nil
	}
}
