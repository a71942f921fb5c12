package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// runCmd runs softhca in-process with the given arguments (without the
// program name) and returns the exit status and what it printed.
func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestDispatch(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     string // substring expected on stdout ("" = must be empty)
		stderr     string // substring expected on stderr ("" = must be empty)
		listsUsage bool   // the command list appears (on stdout or stderr)
	}{
		{name: "no args", args: nil, code: exitUsage, stderr: "Commands:", listsUsage: true},
		{name: "help", args: []string{"help"}, code: exitOK, stdout: "Commands:", listsUsage: true},
		{name: "-h", args: []string{"-h"}, code: exitOK, stdout: "Commands:", listsUsage: true},
		{name: "--help", args: []string{"--help"}, code: exitOK, stdout: "Commands:", listsUsage: true},
		{name: "unknown", args: []string{"frobnicate"}, code: exitUsage, stderr: `unknown command "frobnicate"`, listsUsage: true},
		{name: "help decode", args: []string{"help", "decode"}, code: exitOK, stdout: "usage: softhca decode [-v] FILE.pcap..."},
		{name: "help unknown", args: []string{"help", "nope"}, code: exitUsage, stderr: `unknown command "nope"`, listsUsage: true},
		{name: "help too many", args: []string{"help", "decode", "x"}, code: exitUsage, stderr: "usage: softhca help"},
		{name: "decode -h", args: []string{"decode", "-h"}, code: exitOK, stderr: "usage: softhca decode"},
		{name: "conformance -h", args: []string{"conformance", "-h"}, code: exitOK, stderr: "usage: softhca conformance"},
		{name: "conformance report -h", args: []string{"conformance", "report", "-h"}, code: exitOK, stderr: "usage: softhca conformance report"},
		{name: "decode no files", args: []string{"decode"}, code: exitUsage, stderr: "no capture files"},
		{name: "decode empty name", args: []string{"decode", ""}, code: exitUsage, stderr: `softhca decode: a capture file named "" (an empty argument)`},
		{name: "decode bad flag", args: []string{"decode", "-nope", "x.pcap"}, code: exitUsage, stderr: "flag provided but not defined: -nope"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(t, tc.args...)
			require.Equal(t, tc.code, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			if tc.stdout == "" {
				require.Empty(t, stdout)
			} else {
				require.Contains(t, stdout, tc.stdout)
			}
			if tc.stderr == "" {
				require.Empty(t, stderr)
			} else {
				require.Contains(t, stderr, tc.stderr)
			}
			if tc.listsUsage {
				for _, c := range commands {
					require.Contains(t, stdout+stderr, "\t"+c.name+" ", "usage lists %s", c.name)
				}
			}
		})
	}
}

// TestEveryCommandHelp holds every command's -h to what the issue asks
// of it: exit status 0, an "Examples:" block and the exit statuses, and
// examples that name commands that exist.
func TestEveryCommandHelp(t *testing.T) {
	cmds := [][]string{{"conformance", "report"}}
	for _, c := range commands {
		cmds = append(cmds, []string{c.name})
	}
	for _, cmd := range cmds {
		t.Run(strings.Join(cmd, " "), func(t *testing.T) {
			code, stdout, stderr := runCmd(t, append(cmd, "-h")...)
			require.Equal(t, exitOK, code, "stderr:\n%s", stderr)
			help := stdout + stderr
			require.Contains(t, help, "Examples:")
			require.Contains(t, help, "Exit status")
			// The examples are the indented lines after an unindented
			// line starting "Example" (perf has two such blocks), up to
			// the next unindented line.
			examples, inBlock := 0, false
			for _, line := range strings.Split(help, "\n") {
				if line != "" && line[0] != ' ' && line[0] != '\t' {
					inBlock = strings.HasPrefix(line, "Example")
					continue
				}
				if !inBlock {
					continue
				}
				line = strings.TrimSpace(line)
				// perf's "server:  softhca perf write" and the like.
				if label, rest, ok := strings.Cut(line, ":  "); ok && !strings.Contains(label, " ") {
					line = strings.TrimSpace(rest)
				}
				words := strings.Fields(line)
				if len(words) < 2 || words[0] != "softhca" {
					continue
				}
				examples++
				require.NotNil(t, lookup(words[1]), "%q names no command", line)
			}
			require.GreaterOrEqual(t, examples, 2, "example lines that start with softhca")
		})
	}
}
