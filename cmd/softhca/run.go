package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/softhca/softhca/hcaenv"
)

const runUsage = `usage: softhca run --addr IP [device flags] -- CMD [ARGS...]
       softhca env --addr IP [device flags]

run runs an unmodified libibverbs program (ibv_rc_pingpong, perftest's
ib_write_bw, an application) on a softhca device in its own process: it
puts softhca's drop-in libibverbs.so.1 in front of the system's
(LD_LIBRARY_PATH) and describes the device in SOFTHCA_* variables, which
the library reads. env prints those lines, to do the same by hand
(eval "$(softhca env --addr 127.0.0.1)").

The library is build/libibverbs.so.1 (make libibverbs), found with --lib,
$SOFTHCA_LIB, next to the softhca binary, or in ./build.

Examples:

  softhca run --addr 127.0.0.1 -- ibv_devinfo -v   # rdma-core's ibv_devinfo on the device
  softhca run --addr 10.0.0.2 -- ib_write_bw -x 1 10.0.0.1   # perftest's client on the device
  softhca env --addr 127.0.0.1                  # the same environment, as export lines
  eval "$(softhca env --addr 127.0.0.1)" && ibv_devices

Exit status: run exits with the program's status (128+N when signal N
killed it, 127 when it could not be started); run and env exit 1 when
softhca's libibverbs.so.1 is not found and 2 on usage errors; env exits
0 when it printed the environment.

Device flags:
`

// deviceFlags are the flags of run and env: the settings of hcaenv.
type deviceFlags struct {
	addr, device, rate, lib string
	port, peerPort, mtu     int
	busyPoll                bool
	log                     int
}

func (f *deviceFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.addr, "addr", "", "`IP` address the device binds and publishes as GID 1 (required)")
	fs.IntVar(&f.port, "port", 4791, "UDP `port` the device binds")
	fs.IntVar(&f.peerPort, "peer-port", 4791, "UDP `port` the device sends to")
	fs.StringVar(&f.device, "device", "softhca0", "device `name`")
	fs.IntVar(&f.mtu, "mtu", 0, "the port's active MTU: 256 to 4096 (default from the address: 4096 on loopback, 1024 otherwise)")
	fs.BoolVar(&f.busyPoll, "busy-poll", true, "polling an empty CQ drives the transport (--busy-poll=false: the transport's goroutines only)")
	fs.StringVar(&f.rate, "rate", "", "pace everything sent at this `rate` (bits/s, e.g. 200M)")
	fs.IntVar(&f.log, "log", 0, "library messages: 0 errors, 1 set-up, 2 every failed verb")
	fs.StringVar(&f.lib, "lib", "", "the `directory` (or file) of softhca's libibverbs.so.1")
}

// settings validates the flags as the library would read them.
func (f *deviceFlags) settings() (hcaenv.Settings, error) {
	if f.addr == "" {
		return hcaenv.Settings{}, fmt.Errorf("%w: --addr is required (an address of this machine, such as 127.0.0.1)", syscall.EINVAL)
	}
	vals := map[string]string{
		hcaenv.VarAddr: f.addr, hcaenv.VarPort: strconv.Itoa(f.port), hcaenv.VarPeerPort: strconv.Itoa(f.peerPort),
		hcaenv.VarDevice: f.device, hcaenv.VarLog: strconv.Itoa(f.log), hcaenv.VarBusyPoll: strconv.FormatBool(f.busyPoll),
		hcaenv.VarRate: f.rate,
	}
	if f.mtu != 0 {
		vals[hcaenv.VarMTU] = strconv.Itoa(f.mtu)
	}
	return hcaenv.Parse(vals)
}

// libraryDir finds the directory holding softhca's libibverbs.so.1.
func libraryDir(flagLib string) (string, error) {
	var cands []string
	if flagLib != "" {
		cands = append(cands, flagLib)
	} else {
		if e := os.Getenv("SOFTHCA_LIB"); e != "" {
			cands = append(cands, e)
		}
		if exe, err := os.Executable(); err == nil {
			cands = append(cands, filepath.Dir(exe), filepath.Join(filepath.Dir(exe), "..", "lib", "softhca"))
		}
		cands = append(cands, "build")
	}
	for _, c := range cands {
		if filepath.Base(c) == "libibverbs.so.1" {
			c = filepath.Dir(c)
		}
		if _, err := os.Stat(filepath.Join(c, "libibverbs.so.1")); err == nil {
			return filepath.Abs(c)
		}
	}
	return "", fmt.Errorf("%w: softhca's libibverbs.so.1 is not in %s: build it with make libibverbs (needs gcc and libibverbs-dev), or say where with --lib", syscall.ENOENT, strings.Join(cands, ", "))
}

// libEnv returns the environment lines for a program on the device.
func libEnv(s hcaenv.Settings, dir string) []string {
	ld := dir
	if old := os.Getenv("LD_LIBRARY_PATH"); old != "" {
		ld += ":" + old
	}
	return append(s.Env(), "LD_LIBRARY_PATH="+ld)
}

// parseDeviceCommand parses the flags of run or env, validates the
// device they describe and finds the library; on failure it has said why
// and returns the exit status.
func parseDeviceCommand(name string, args []string, stderr io.Writer) (fs *flag.FlagSet, s hcaenv.Settings, dir string, status int) {
	fs = flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f deviceFlags
	f.register(fs)
	fs.Usage = func() { fmt.Fprint(stderr, runUsage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return nil, s, "", usageStatus(err)
	}
	switch {
	case name == "env" && fs.NArg() > 0:
		fmt.Fprintf(stderr, "softhca env: unexpected argument %q\n", fs.Arg(0))
		return nil, s, "", exitUsage
	case name == "run" && fs.NArg() == 0:
		fmt.Fprintln(stderr, "softhca run: no program to run (softhca run --addr IP -- CMD ARGS...)")
		return nil, s, "", exitUsage
	}
	s, err := f.settings()
	if err != nil {
		fmt.Fprintf(stderr, "softhca %s: %v\n", name, err)
		return nil, s, "", exitUsage
	}
	if dir, err = libraryDir(f.lib); err != nil {
		fmt.Fprintf(stderr, "softhca %s: %v\n", name, err)
		return nil, s, "", exitFailure
	}
	return fs, s, dir, exitOK
}

func runEnv(args []string, stdout, stderr io.Writer) int {
	_, s, dir, status := parseDeviceCommand("env", args, stderr)
	if status != exitOK || dir == "" {
		return status
	}
	for _, kv := range libEnv(s, dir) {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(stdout, "export %s=%s\n", k, shellQuote(v))
	}
	return exitOK
}

func runRun(args []string, stdout, stderr io.Writer) int {
	fs, s, dir, status := parseDeviceCommand("run", args, stderr)
	if status != exitOK || dir == "" {
		return status
	}
	if fs.Arg(0) == "" {
		// exec would say "exec: no command".
		fmt.Fprintln(stderr, `softhca run: the program to run is named "" (an empty argument)`)
		return 127
	}
	cmd := exec.Command(fs.Arg(0), fs.Args()[1:]...)
	cmd.Env = append(os.Environ(), libEnv(s, dir)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				return 128 + int(ws.Signal())
			}
			return ee.ExitCode()
		}
		fmt.Fprintf(stderr, "softhca run: %v\n", err)
		return 127
	}
	return exitOK
}

func usageStatus(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-:,+=@", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
