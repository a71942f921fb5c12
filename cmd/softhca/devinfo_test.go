package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/cmd/softhca/internal/devinfo"
	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/hcaenv"
	"github.com/softhca/softhca/verbs"
)

// clearSofthcaEnv unsets the SOFTHCA_* variables for the test (they are
// restored after it), so that the in-process device is the default one.
func clearSofthcaEnv(t *testing.T) {
	t.Helper()
	for _, k := range append([]string{hcaenv.VarConfig}, hcaenv.Vars...) {
		t.Setenv(k, "") // registers the restore
		require.NoError(t, os.Unsetenv(k))
	}
}

// setPrimaryAddr makes the host's primary address a for the test.
func setPrimaryAddr(t *testing.T, a string) {
	t.Helper()
	old := primaryAddr
	primaryAddr = func() netip.Addr { return netip.MustParseAddr(a) }
	t.Cleanup(func() { primaryAddr = old })
}

// setDaemon installs a daemon client for the test.
func setDaemon(t *testing.T, q func(context.Context) ([]devinfo.Device, bool, error)) {
	t.Helper()
	old := queryDaemon
	queryDaemon = q
	t.Cleanup(func() { queryDaemon = old })
}

// describe returns what devinfo.Write prints for a device opened with
// cfg, as the command's reference.
func describe(t *testing.T, cfg hca.Config, verbose bool) string {
	t.Helper()
	d, err := hca.Open(cfg)
	require.NoError(t, err)
	defer d.Close()
	dev, err := devinfo.FromDevice(d)
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, devinfo.Write(&b, dev, verbose))
	return b.String()
}

// TestDevinfoDefaultDevice: without a daemon or settings, devinfo
// describes softhca0 on the host's primary address, with the MTU its
// interface allows.
func TestDevinfoDefaultDevice(t *testing.T) {
	clearSofthcaEnv(t)
	setPrimaryAddr(t, "10.77.0.2")
	for _, verbose := range []bool{false, true} {
		args := []string{"devinfo"}
		if verbose {
			args = append(args, "-v")
		}
		code, stdout, stderr := runCmd(t, args...)
		require.Equal(t, exitOK, code, stderr)
		require.Empty(t, stderr)
		want := describe(t, hca.Config{Addrs: []netip.Addr{netip.MustParseAddr("10.77.0.2")},
			PortAttr: verbs.PortAttr{ActiveMTU: hca.ActiveMTUFor(netip.MustParseAddr("10.77.0.2"))}}, verbose)
		require.Equal(t, want, stdout)
		require.True(t, strings.HasPrefix(stdout, "hca_id:\tsofthca0\n"), stdout)
		if verbose {
			require.Contains(t, stdout, "\t\t\tGID[  1]:\t\t::ffff:10.77.0.2, RoCE v2\n")
		}
	}
}

// TestDevinfoSettings: the SOFTHCA_* settings the drop-in library reads
// name the device, its address and MTU; --addr overrides the address.
func TestDevinfoSettings(t *testing.T) {
	clearSofthcaEnv(t)
	setPrimaryAddr(t, "192.0.2.99") // not used
	t.Setenv(hcaenv.VarAddr, "192.0.2.7")
	t.Setenv(hcaenv.VarDevice, "softhca4")
	t.Setenv(hcaenv.VarMTU, "2048")
	code, stdout, stderr := runCmd(t, "devinfo", "-v")
	require.Equal(t, exitOK, code, stderr)
	require.True(t, strings.HasPrefix(stdout, "hca_id:\tsofthca4\n"), stdout)
	require.Contains(t, stdout, "\t\t\tactive_mtu:\t\t2048 (4)\n")
	require.Contains(t, stdout, "\t\t\tGID[  1]:\t\t::ffff:192.0.2.7, RoCE v2\n")
	require.NotContains(t, stdout, "192.0.2.99")

	code, stdout, stderr = runCmd(t, "devinfo", "-v", "--addr", "2001:db8::5")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "\t\t\tGID[  1]:\t\t2001:db8::5, RoCE v2\n")
	require.NotContains(t, stdout, "192.0.2.7")

	t.Setenv(hcaenv.VarMTU, "1500")
	code, stdout, stderr = runCmd(t, "devinfo")
	require.Equal(t, devinfoExitFailed, code)
	require.Empty(t, stdout)
	require.Contains(t, stderr, "Failed to get IB devices list: ")
	require.Contains(t, stderr, `SOFTHCA_MTU="1500": want 256, 512, 1024, 2048 or 4096`)
}

// TestDevinfoBindsNoSocket: describing the device does not bind UDP
// port 4791, which a kernel rxe or a daemon may hold.
func TestDevinfoBindsNoSocket(t *testing.T) {
	clearSofthcaEnv(t)
	// An address of its own on loopback, so that holding its port
	// disturbs no other test on this machine.
	c, err := net.ListenPacket("udp", "127.84.79.91:4791")
	if err == nil {
		defer c.Close()
	} // else something holds the port (a wildcard bind): as good
	code, stdout, stderr := runCmd(t, "devinfo", "--addr", "127.84.79.91")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "hca_id:\tsofthca0\n")
}

func TestDevinfoOptions(t *testing.T) {
	clearSofthcaEnv(t)
	setPrimaryAddr(t, "10.77.0.2")
	full := describe(t, hca.Config{Addrs: []netip.Addr{netip.MustParseAddr("10.77.0.2")},
		PortAttr: verbs.PortAttr{ActiveMTU: hca.ActiveMTUFor(netip.MustParseAddr("10.77.0.2"))}}, true)
	short := describe(t, hca.Config{Addrs: []netip.Addr{netip.MustParseAddr("10.77.0.2")},
		PortAttr: verbs.PortAttr{ActiveMTU: hca.ActiveMTUFor(netip.MustParseAddr("10.77.0.2"))}}, false)
	list := "1 HCA found:\n\tsofthca0\n\n"
	for _, c := range []struct {
		args   []string
		code   int
		stdout string // exactly; "usage" for the usage text
		stderr string // substring; "" for none
	}{
		{[]string{"-v"}, exitOK, full, ""},
		{[]string{"--verbose"}, exitOK, full, ""},
		{[]string{"--verb"}, exitOK, full, ""},
		{[]string{"-vi1"}, exitOK, full, ""},
		{[]string{"-v", "-i", "0x1"}, exitOK, full, ""},
		{[]string{"-v", "--ib-port=1"}, exitOK, full, ""},
		{[]string{"-v", "--ib-p", "1"}, exitOK, full, ""},
		{[]string{"-d", "softhca0"}, exitOK, short, ""},
		{[]string{"-dsofthca0"}, exitOK, short, ""},
		{[]string{"--ib-dev=softhca0"}, exitOK, short, ""},
		{[]string{"-vd", "softhca0"}, exitOK, full, ""},
		{[]string{"-l"}, exitOK, list, ""},
		{[]string{"--list", "-d", "nope"}, exitOK, list, ""},
		{[]string{"-lj"}, exitOK, "[\n  \"softhca0\"\n]\n", ""},
		{[]string{"--"}, exitOK, short, ""},
		{[]string{"-h"}, exitOK, "usage", ""},
		{[]string{"--help"}, exitOK, "usage", ""},
		{[]string{"-v", "-h"}, exitOK, "usage", ""},

		{[]string{"-d", "mlx5_0"}, devinfoExitFailed, "", "IB device 'mlx5_0' wasn't found\n"},
		{[]string{"-d", ""}, devinfoExitFailed, "", "IB device '' wasn't found\n"},
		{[]string{"--ib-dev="}, devinfoExitFailed, "", "IB device '' wasn't found\n"},
		{[]string{"-i", "2"}, devinfoExitNoSuchPort, "", "Invalid port requested for device\n"},
		{[]string{"-j", "-i", "2"}, devinfoExitNoSuchPort, "[]\n", "Invalid port requested for device\n"},
		{[]string{"-i", "0"}, devinfoExitBadPortArg, "", `-i/--ib-port: "0" is not a port number (1..255)`},
		{[]string{"-i", "-3"}, devinfoExitBadPortArg, "", `"-3" is not a port number`},
		{[]string{"-i", "256"}, devinfoExitBadPortArg, "", `"256" is not a port number`},
		{[]string{"-i", "1x"}, devinfoExitBadPortArg, "", `"1x" is not a port number (1..255): not a number`},
		{[]string{"-i"}, devinfoExitFailed, "", "option requires an argument -- 'i'"},
		{[]string{"--ib-port"}, devinfoExitFailed, "", "option '--ib-port' requires an argument"},
		{[]string{"-x"}, devinfoExitFailed, "", "invalid option -- 'x'"},
		{[]string{"-vx"}, devinfoExitFailed, "", "invalid option -- 'x'"},
		{[]string{"--frob"}, devinfoExitFailed, "", "unrecognized option '--frob'"},
		{[]string{"--ib", "x"}, devinfoExitFailed, "", "option '--ib' is ambiguous; possibilities: '--ib-dev' '--ib-port'"},
		{[]string{"--list=yes"}, devinfoExitFailed, "", "option '--list' doesn't allow an argument"},
		{[]string{"softhca0"}, devinfoExitFailed, "", `unexpected argument "softhca0"`},
		{[]string{"--", "x"}, devinfoExitFailed, "", `unexpected argument "x"`},
		{[]string{"--addr", "0.0.0.0"}, devinfoExitFailed, "", `--addr: "0.0.0.0" is not an IP address of this machine`},
		{[]string{"-addr", "nope"}, devinfoExitFailed, "", `--addr: "nope" is not an IP address`},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, stdout, stderr := runCmd(t, append([]string{"devinfo"}, c.args...)...)
			require.Equal(t, c.code, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			if c.stdout == "usage" {
				require.Equal(t, devinfoUsage, stdout)
			} else {
				require.Equal(t, c.stdout, stdout)
			}
			if c.stderr == "" {
				require.Empty(t, stderr)
			} else {
				require.Contains(t, stderr, c.stderr)
				require.NotContains(t, stderr, "goroutine", "no panic")
			}
			if code != exitOK && strings.Contains(stderr, "softhca devinfo: ") {
				require.Contains(t, stderr, "usage: softhca devinfo", "a usage error shows the usage")
			}
		})
	}
}

func TestDevinfoHelp(t *testing.T) {
	code, stdout, stderr := runCmd(t, "help", "devinfo")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, devinfoUsage, stdout)
	code, stdout, _ = runCmd(t, "help")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "\tdevinfo  ")
}

// TestDevinfoJSON: -j prints the device, every attribute, as JSON that
// reads back into devinfo.Device.
func TestDevinfoJSON(t *testing.T) {
	clearSofthcaEnv(t)
	setPrimaryAddr(t, "10.77.0.2")
	code, stdout, stderr := runCmd(t, "devinfo", "-j")
	require.Equal(t, exitOK, code, stderr)
	var devs []devinfo.Device
	require.NoError(t, json.Unmarshal([]byte(stdout), &devs))
	require.Len(t, devs, 1)
	d, err := hca.Open(hca.Config{Addrs: []netip.Addr{netip.MustParseAddr("10.77.0.2")},
		PortAttr: verbs.PortAttr{ActiveMTU: hca.ActiveMTUFor(netip.MustParseAddr("10.77.0.2"))}})
	require.NoError(t, err)
	defer d.Close()
	want, err := devinfo.FromDevice(d)
	require.NoError(t, err)
	require.Equal(t, want, devs[0])
	require.Contains(t, stdout, `"max_mr_size": "18446744073709551615"`)
	require.Contains(t, stdout, `"gid": "::ffff:10.77.0.2"`)
}

// TestDevinfoDaemon: the daemon's devices, when one answers, in its
// order; -d and -i pick among them; its failure is reported.
func TestDevinfoDaemon(t *testing.T) {
	clearSofthcaEnv(t)
	setPrimaryAddr(t, "10.77.0.2")
	a := fakeDevice(t, "softhca0", 1)
	b := fakeDevice(t, "softhca1", 2)
	calls := 0
	setDaemon(t, func(context.Context) ([]devinfo.Device, bool, error) {
		calls++
		return []devinfo.Device{a, b}, true, nil
	})

	code, stdout, stderr := runCmd(t, "devinfo", "-l")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "2 HCAs found:\n\tsofthca0\n\tsofthca1\n\n", stdout)
	require.Equal(t, 1, calls)

	var wa, wb bytes.Buffer
	require.NoError(t, devinfo.Write(&wa, a, false))
	require.NoError(t, devinfo.Write(&wb, b, false))
	code, stdout, stderr = runCmd(t, "devinfo")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, wa.String()+wb.String(), stdout, "every device, in order")

	code, stdout, stderr = runCmd(t, "devinfo", "-d", "softhca1", "-i", "2")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "hca_id:\tsofthca1\n")
	require.Contains(t, stdout, "\t\tport:\t2\n")
	require.NotContains(t, stdout, "\t\tport:\t1\n")

	// Port 2 exists on softhca1 only: ibv_devinfo ORs the statuses.
	code, stdout, stderr = runCmd(t, "devinfo", "-i", "2")
	require.Equal(t, devinfoExitNoSuchPort, code)
	require.Equal(t, "Invalid port requested for device\n", stderr)
	require.NotContains(t, stdout, "softhca0")
	require.Contains(t, stdout, "hca_id:\tsofthca1\n")

	// A port the device counts but does not describe.
	b.Ports = b.Ports[:1]
	setDaemon(t, func(context.Context) ([]devinfo.Device, bool, error) { return []devinfo.Device{b}, true, nil })
	code, _, stderr = runCmd(t, "devinfo", "-i", "2")
	require.Equal(t, devinfoExitFailed, code)
	require.Equal(t, "Failed to query port 2 props\n", stderr)

	setDaemon(t, func(context.Context) ([]devinfo.Device, bool, error) { return nil, true, nil })
	code, stdout, stderr = runCmd(t, "devinfo")
	require.Equal(t, devinfoExitFailed, code)
	require.Empty(t, stdout)
	require.Equal(t, "No IB devices found\n", stderr)
	code, stdout, _ = runCmd(t, "devinfo", "-l")
	require.Equal(t, exitOK, code)
	require.Equal(t, "0 HCAs found:\n\n", stdout)

	setDaemon(t, func(context.Context) ([]devinfo.Device, bool, error) {
		return nil, false, errors.New("connection reset")
	})
	code, stdout, stderr = runCmd(t, "devinfo")
	require.Equal(t, devinfoExitFailed, code)
	require.Empty(t, stdout)
	require.Equal(t, "Failed to get IB devices list: the softhca daemon: connection reset\n", stderr)

	// No daemon: the in-process device.
	setDaemon(t, func(context.Context) ([]devinfo.Device, bool, error) { return nil, false, nil })
	code, stdout, stderr = runCmd(t, "devinfo", "-l")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "1 HCA found:\n\tsofthca0\n\n", stdout)
}

// fakeDevice is a daemon's device with ports ports.
func fakeDevice(t *testing.T, name string, ports uint8) devinfo.Device {
	t.Helper()
	d, err := hca.Open(hca.Config{Name: name, Addrs: []netip.Addr{netip.MustParseAddr("10.77.0.2")}})
	require.NoError(t, err)
	defer d.Close()
	dev, err := devinfo.FromDevice(d)
	require.NoError(t, err)
	dev.Attr.PhysPortCnt = ports
	for n := uint8(2); n <= ports; n++ {
		p := dev.Ports[0]
		p.Num = n
		dev.Ports = append(dev.Ports, p)
	}
	return dev
}
