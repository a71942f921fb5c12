package control

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadLimited: a line longer than the bound is refused whole, however
// the reader's buffer cuts it; shorter lines come back with their
// newline, and a last line without one is an EOF.
func TestReadLimited(t *testing.T) {
	br := bufio.NewReaderSize(strings.NewReader("short\n"+strings.Repeat("x", 100)+"\nrest"), 16)
	line, err := readLimited(br, 64)
	require.NoError(t, err)
	require.Equal(t, "short\n", string(line))
	_, err = readLimited(br, 64)
	require.True(t, errors.Is(err, errTooLong), "%v", err)
	br = bufio.NewReaderSize(strings.NewReader("no newline"), 16)
	_, err = readLimited(br, 64)
	require.ErrorIs(t, err, io.EOF)
}
