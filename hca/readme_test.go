package hca_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadmeShowsTheExample: the README's "Using the library" shows
// example_test.go as it is, so the code a newcomer reads first is the code
// go test runs.
func TestReadmeShowsTheExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	example, err := os.ReadFile("example_test.go")
	require.NoError(t, err)
	require.True(t, strings.Contains(string(readme), "```go\n"+string(example)+"```\n"),
		"README.md's \"Using the library\" must show hca/example_test.go verbatim in a go code block; copy it there")
}
