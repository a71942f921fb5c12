package daemon

import (
	"bytes"
	"fmt"
	"strings"
	"syscall"
	"unicode/utf8"
)

// Setting is one line of a configuration file: a flag name and its
// value.
type Setting struct {
	Line       int
	Key, Value string
}

// MaxConfigFile bounds a configuration file.
const MaxConfigFile = 64 << 10

// ParseConfigFile parses the configuration file `softhca serve --config`
// reads: one "key = value" per line, where key is a long flag name of
// serve (listen, name, region, ...; a key may repeat where the flag
// does), '#' starts a comment, blank lines are skipped, and a value may
// be quoted with double quotes (to keep a '#' or surrounding spaces).
// Errors name the file and line and wrap EINVAL. The keys are not
// checked here: the command checks them against its flags.
func ParseConfigFile(name string, b []byte) ([]Setting, error) {
	if len(b) > MaxConfigFile {
		return nil, fmt.Errorf("%s: %d bytes, more than a configuration file's %d: %w", name, len(b), MaxConfigFile, syscall.EINVAL)
	}
	if !utf8.Valid(b) || bytes.IndexByte(b, 0) >= 0 {
		return nil, fmt.Errorf("%s: not a text file: %w", name, syscall.EINVAL)
	}
	var out []Setting
	for i, line := range strings.Split(string(b), "\n") {
		n := i + 1
		line = strings.TrimSpace(strings.TrimSuffix(line, "\r"))
		if line == "" || line[0] == '#' {
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%s:%d: %q: want key = value: %w", name, n, line, syscall.EINVAL)
		}
		key = strings.TrimSpace(key)
		val = strings.TrimSpace(val)
		if key == "" || strings.ContainsAny(key, " \t\"#") {
			return nil, fmt.Errorf("%s:%d: %q is not a key (a flag name such as listen): %w", name, n, key, syscall.EINVAL)
		}
		if strings.HasPrefix(val, `"`) {
			end := strings.IndexByte(val[1:], '"')
			if end < 0 {
				return nil, fmt.Errorf("%s:%d: unterminated quote: %w", name, n, syscall.EINVAL)
			}
			rest := strings.TrimSpace(val[end+2:])
			if rest != "" && rest[0] != '#' {
				return nil, fmt.Errorf("%s:%d: text after the quoted value: %w", name, n, syscall.EINVAL)
			}
			val = val[1 : end+1]
		} else if c := strings.IndexByte(val, '#'); c >= 0 {
			val = strings.TrimSpace(val[:c])
		}
		out = append(out, Setting{Line: n, Key: key, Value: val})
	}
	return out, nil
}
