//go:build libibverbs

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// libDir is the directory of the libibverbs.so.1 TestMain built, for
// LD_LIBRARY_PATH.
var libDir string

// TestMain builds the library the tests load into unmodified programs, as
// make libibverbs does.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "softhca-libibverbs")
	if err != nil {
		panic(err)
	}
	libDir = dir
	code := 1
	if err := buildLibrary(dir); err != nil {
		os.Stderr.WriteString("building libibverbs.so.1: " + err.Error() + "\n")
	} else {
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

func buildLibrary(dir string) error {
	_, self, _, _ := runtime.Caller(0)
	pkg := filepath.Dir(self)
	ld := "-extldflags '-Wl,--version-script=" + filepath.Join(pkg, "libibverbs.map") + " -Wl,-soname,libibverbs.so.1'"
	cmd := exec.Command("go", "build", "-tags", "libibverbs", "-buildmode=c-shared",
		"-ldflags", ld, "-o", filepath.Join(dir, "libibverbs.so.1"), ".")
	cmd.Dir = pkg
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

// libEnv returns the environment of a program run on the library with a
// device on addr.
func libEnv(addr string, extra ...string) []string {
	env := append(os.Environ(), "LD_LIBRARY_PATH="+libDir, "SOFTHCA_ADDR="+addr)
	return append(env, extra...)
}
