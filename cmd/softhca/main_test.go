package main

import (
	"bytes"
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
