package pcap_test

import (
	"bytes"
	"fmt"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// tsharkPath returns tshark's path, or skips the test when it is not
// installed, except in CI (CI=true), where the test must run.
func tsharkPath(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("tshark")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("tshark is not on PATH, and CI=true: CI must install tshark (Wireshark) for this test: %v", err)
		}
		t.Skipf("tshark is not on PATH; install tshark (Wireshark) to run this test: %v", err)
	}
	return path
}

// wiresharkUnknown lists the opcodes that Wireshark 4.0's InfiniBand
// dissector does not know, and shows as "Unknown OpCode" in the Info
// column: FLUSH and ATOMIC WRITE (IBTA 1.5), and the RoCEv2 CNP, 0x81
// (annex A17.9.2), where Wireshark names 0x80, the CNP of native
// InfiniBand congestion control (IBTA annex A10). Newer versions may name
// them, so either form is accepted.
var wiresharkUnknown = map[wire.OpCode]bool{
	wire.RCFlush:       true,
	wire.RCAtomicWrite: true,
	wire.CNP:           true,
}

// TestTshark writes a packet of every opcode, over IPv4 and IPv6, and has
// tshark dissect the file. Every packet must show up as InfiniBand with
// the right opcode, destination QP and PSN, an Info column that starts
// with the opcode's name (wire.OpCode.String is meant to be Wireshark's
// name), and the ICRC that was written.
func TestTshark(t *testing.T) {
	tshark := tsharkPath(t)
	pkts := testPackets()
	file := filepath.Join(t.TempDir(), "softhca.pcap")
	require.NoError(t, os.WriteFile(file, writePcap(t, pkts, time.Unix(1700000000, 0)), 0o644))

	fields := []string{"frame.number", "ip.src", "ipv6.src", "infiniband.bth.opcode",
		"infiniband.bth.destqp", "infiniband.bth.psn", "infiniband.invariant.crc", "_ws.col.Info"}
	args := []string{"-r", file, "-d", "udp.port==4791,infiniband", "-T", "fields"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(tshark, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "tshark %s\nstderr: %s", strings.Join(args, " "), stderr.String())

	lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	require.Len(t, lines, len(pkts), "tshark output:\n%s", stdout.String())
	for i, line := range lines {
		p := &pkts[i]
		t.Run(p.String(), func(t *testing.T) {
			col := strings.Split(line, "\t")
			require.Len(t, col, len(fields), "line %q", line)
			got := map[string]string{}
			for j, f := range fields {
				got[f] = col[j]
			}
			op := p.op()
			require.Equal(t, strconv.Itoa(i+1), got["frame.number"])
			src := got["ip.src"]
			if p.net.IsIPv6() {
				src = got["ipv6.src"]
			}
			require.Equal(t, p.net.Src.String(), src)
			require.Equal(t, strconv.Itoa(int(op)), got["infiniband.bth.opcode"], "line %q", line)
			require.Equal(t, fmt.Sprintf("0x%06x", p.h.BTH.DestQP), got["infiniband.bth.destqp"])
			require.Equal(t, strconv.Itoa(int(p.h.BTH.PSN)), got["infiniband.bth.psn"])

			// The Info column is "<name> QP=0x<qpn>" (with no space after
			// "UC RDMA Write First" in Wireshark 4.0).
			info := got["_ws.col.Info"]
			qp := fmt.Sprintf("QP=0x%06x", p.h.BTH.DestQP)
			name, ok := strings.CutSuffix(strings.TrimSpace(info), qp)
			require.True(t, ok, "Info %q does not end with %s", info, qp)
			name = strings.TrimSpace(name)
			if wiresharkUnknown[op] && name == "Unknown OpCode" {
				t.Logf("tshark does not know %s (%#02x): %q", op, uint8(op), info)
				return
			}
			require.Equal(t, op.String(), name, "Info %q", info)
			// tshark shows the ICRC bytes as a big-endian number.
			icrc := bits.ReverseBytes32(wire.StoredICRC(p.ib))
			require.Equal(t, fmt.Sprintf("0x%08x", icrc), got["infiniband.invariant.crc"])
		})
	}
}

// TestTsharkSummary checks tshark's default one-line summary of a few
// packets: protocol, length and Info.
func TestTsharkSummary(t *testing.T) {
	tshark := tsharkPath(t)
	var pkts []testPacket
	for _, p := range testPackets() {
		if op := p.op(); op == wire.RCSendOnly || op == wire.RCAcknowledge || op == wire.UDSendOnly {
			pkts = append(pkts, p)
		}
	}
	require.Len(t, pkts, 6)
	file := filepath.Join(t.TempDir(), "summary.pcap")
	require.NoError(t, os.WriteFile(file, writePcap(t, pkts, time.Unix(1700000000, 0)), 0o644))
	out, err := exec.Command(tshark, "-r", file, "-d", "udp.port==4791,infiniband").Output()
	require.NoError(t, err)
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	require.Len(t, lines, len(pkts), "%s", out)
	for i, line := range lines {
		p := &pkts[i]
		// For example:
		//     1   0.000000    192.0.2.1 → 192.0.2.2    RRoCE 58 RC Send Only QP=0x000104
		ipLen := p.net.IPHeaderSize() + wire.UDPHeaderSize + len(p.ib)
		want := fmt.Sprintf(" %s %d %s QP=0x%06x", "RRoCE", max(14+ipLen, 60), p.op(), p.h.BTH.DestQP)
		require.Contains(t, line, p.net.Src.String()+" → "+p.net.Dst.String())
		require.True(t, strings.HasSuffix(strings.TrimRight(line, " "), want), "line %q, want suffix %q", line, want)
	}
}
