package daemon_test

import (
	"strings"
	"syscall"
	"testing"

	"github.com/softhca/softhca/cmd/softhca/internal/daemon"
	"github.com/stretchr/testify/require"
)

func TestParseConfigFile(t *testing.T) {
	got, err := daemon.ParseConfigFile("s.conf", []byte(`# softhca serve
listen = 127.0.0.1:4791
name=lab0   # trailing comment

region = a:4K:rw
region = "b:8K:r"  # quoted
http = ""
`))
	require.NoError(t, err)
	require.Equal(t, []daemon.Setting{
		{2, "listen", "127.0.0.1:4791"}, {3, "name", "lab0"}, {5, "region", "a:4K:rw"},
		{6, "region", "b:8K:r"}, {7, "http", ""},
	}, got)
	for in, msg := range map[string]string{
		"listen 127.0.0.1": "s.conf:1: \"listen 127.0.0.1\": want key = value",
		"= x":              "s.conf:1: \"\" is not a key",
		"a b = x":          "is not a key",
		"x = \"open":       "s.conf:1: unterminated quote",
		"x = \"v\" more":   "text after the quoted value",
		"\n\nx = \x00":     "not a text file",
		strings.Repeat("#", daemon.MaxConfigFile+1): "more than a configuration file's",
	} {
		_, err := daemon.ParseConfigFile("s.conf", []byte(in))
		require.ErrorIs(t, err, syscall.EINVAL, in)
		require.ErrorContains(t, err, msg)
	}
}

// FuzzParseConfigFile: no input panics; every setting has a key without
// spaces and a line within the file.
func FuzzParseConfigFile(f *testing.F) {
	for _, s := range []string{"listen = 1.2.3.4\n", "# c\nregion = \"a:1:r\" # x\n", "x=\"", "=\n=", "\r\n\r\nk=v\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := daemon.ParseConfigFile("f", b)
		if err != nil {
			require.ErrorIs(t, err, syscall.EINVAL)
			return
		}
		lines := strings.Count(string(b), "\n") + 1
		for _, s := range got {
			require.NotEmpty(t, s.Key)
			require.False(t, strings.ContainsAny(s.Key, " \t\"#"))
			require.True(t, s.Line >= 1 && s.Line <= lines)
		}
	})
}
