package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/internal/testcaps"
	"github.com/softhca/softhca/wire"
)

// lines splits output into its lines, without the final newline.
func lines(s string) []string {
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// summary is the summary line decode prints for a file with the given
// counts.
func summary(path string, frames, roce, ok, bad, other int) string {
	return fmt.Sprintf("%s: %d packets, %d RoCEv2, %d ok, %d bad, %d not RoCEv2",
		path, frames, roce, ok, bad, other)
}

// loadCapture reads one rxe capture by name.
func loadCapture(t *testing.T, name string) testcaps.Capture {
	t.Helper()
	c, err := testcaps.Read(filepath.Join(testcaps.Dir(), name))
	require.NoError(t, err)
	return c
}

// parseFrame parses an Ethernet frame of a capture with wire.Parse.
func parseFrame(t *testing.T, f testcaps.Frame) *wire.Packet {
	t.Helper()
	ip := f.IP()
	require.NotNil(t, ip, "frame %d is not IP", f.Index)
	var p wire.Packet
	require.Equal(t, wire.DropNone, wire.Parse(ip, &p), "frame %d", f.Index)
	return &p
}

// rec is a frame to write into a test capture.
type rec struct {
	time    time.Time
	data    []byte
	origLen int // 0: len(data)
}

func recsOf(c testcaps.Capture) []rec {
	rs := make([]rec, len(c.Frames))
	for i, f := range c.Frames {
		rs[i] = rec{time: f.Time, data: f.Data}
	}
	return rs
}

func (r rec) ci() gopacket.CaptureInfo {
	n := r.origLen
	if n == 0 {
		n = len(r.data)
	}
	return gopacket.CaptureInfo{Timestamp: r.time, CaptureLength: len(r.data), Length: n}
}

// writePcap writes recs as a pcap file with the given link type and
// returns its path.
func writePcap(t *testing.T, name string, lt layers.LinkType, recs []rec) string {
	t.Helper()
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	require.NoError(t, w.WriteFileHeader(65536, lt))
	for _, r := range recs {
		require.NoError(t, w.WritePacket(r.ci(), r.data))
	}
	return writeFile(t, name, buf.Bytes())
}

// writeEtherPcap is writePcap with the Ethernet link type.
func writeEtherPcap(t *testing.T, name string, recs []rec) string {
	t.Helper()
	return writePcap(t, name, layers.LinkTypeEthernet, recs)
}

func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return path
}

// TestDecodeCaptures decodes every rxe capture: exit 0, one line per frame
// plus the summary, and each line agrees with what wire.Parse reads.
func TestDecodeCaptures(t *testing.T) {
	caps, err := testcaps.Load()
	require.NoError(t, err)
	for _, c := range caps {
		t.Run(c.Name, func(t *testing.T) {
			code, stdout, stderr := runCmd(t, "decode", c.Path)
			require.Equal(t, exitOK, code, stderr)
			require.Empty(t, stderr)
			ls := lines(stdout)
			require.Len(t, ls, len(c.Frames)+1)
			n := len(c.Frames)
			require.Equal(t, summary(c.Path, n, n, n, 0, 0), ls[n])
			for i, f := range c.Frames {
				checkLine(t, ls[i], f, c.Frames[0].Time)
			}
		})
	}
}

// checkLine checks that a decode line shows the fields wire.Parse reads
// from the frame.
func checkLine(t *testing.T, line string, f testcaps.Frame, start time.Time) {
	t.Helper()
	p := parseFrame(t, f)
	h := p.BTH
	prefix := fmt.Sprintf("frame %d: %.6f %s -> %s: %s qp=%#x psn=%d",
		f.Index, f.Time.Sub(start).Seconds(),
		netip.AddrPortFrom(p.Net.Src, p.Net.SrcPort), netip.AddrPortFrom(p.Net.Dst, p.Net.DstPort),
		h.OpCode(), h.DestQP(), h.PSN())
	require.True(t, strings.HasPrefix(line, prefix), "line %q\nwant prefix %q", line, prefix)
	require.True(t, strings.HasSuffix(line, fmt.Sprintf(" len=%d icrc ok", len(p.Payload))), line)
	tokens := strings.Fields(line)
	require.Equal(t, h.AckReq(), slices.Contains(tokens, "ackreq"), line)
	require.Equal(t, h.SolicitedEvent(), slices.Contains(tokens, "se"), line)
	has := map[string]bool{
		" deth{":      p.DETH != nil,
		" reth{":      p.RETH != nil,
		" atomic{":    p.AtomicETH != nil,
		" aeth{":      p.AETH != nil,
		" atomicack{": p.AtomicAckETH != nil,
		" imm=":       p.ImmDt != nil,
		" ieth{":      p.IETH != nil,
	}
	for tok, want := range has {
		require.Equal(t, want, strings.Contains(line, tok), "%q in %q", tok, line)
	}
	if p.RETH != nil {
		require.Contains(t, line, fmt.Sprintf(" reth{va=%#x rkey=%#x dlen=%d}",
			p.RETH.VirtualAddress(), p.RETH.RKey(), p.RETH.DMALength()))
	}
	if p.AETH != nil {
		require.Contains(t, line, fmt.Sprintf(" aeth{%s syn=0x%02x msn=%d}",
			p.AETH.Syndrome(), uint8(p.AETH.Syndrome()), p.AETH.MSN()))
	}
	if p.DETH != nil {
		require.Contains(t, line, fmt.Sprintf(" deth{qkey=%#x srcqp=%#x}", p.DETH.QKey(), p.DETH.SrcQP()))
	}
	if p.ImmDt != nil {
		require.Contains(t, line, fmt.Sprintf(" imm=0x%08x", p.ImmDt.Value()))
	}
	if p.AtomicAckETH != nil {
		require.Contains(t, line, fmt.Sprintf(" atomicack{orig=%#x}", p.AtomicAckETH.OriginalRemoteData()))
	}
}

// TestDecodeAllFiles decodes every capture in one run: a summary per file
// and a total line that adds them up.
func TestDecodeAllFiles(t *testing.T) {
	caps, err := testcaps.Load()
	require.NoError(t, err)
	args := []string{"decode"}
	total := 0
	for _, c := range caps {
		args = append(args, c.Path)
		total += len(c.Frames)
	}
	code, stdout, stderr := runCmd(t, args...)
	require.Equal(t, exitOK, code, stderr)
	ls := lines(stdout)
	require.Len(t, ls, total+len(caps)+1)
	require.Equal(t, fmt.Sprintf("total: %d files, %d packets, %d RoCEv2, %d ok, 0 bad, 0 not RoCEv2",
		len(caps), total, total, total), ls[len(ls)-1])
	for _, c := range caps {
		n := len(c.Frames)
		require.Contains(t, ls, summary(c.Path, n, n, n, 0, 0))
	}
}

// TestDecodeGoldenLines pins the output format on a few opcodes. The field
// values were checked against Wireshark's dissection of the same frames.
func TestDecodeGoldenLines(t *testing.T) {
	golden := map[string]map[int]string{
		"atomic_fadd.pcap": {
			1: "frame 1: 0.000000 10.77.0.2:50241 -> 10.77.0.3:4791: RC Fetch Add qp=0x21 psn=12453421 ackreq atomic{va=0x55d631cd0000 rkey=0xffa add=0x1 cmp=0x0} len=0 icrc ok",
			2: "frame 2: 0.001477 10.77.0.3:50241 -> 10.77.0.2:4791: RC Atomic Acknowledge qp=0x21 psn=12453421 aeth{ACK syn=0x1f msn=1} atomicack{orig=0xcca413826d446898} len=0 icrc ok",
		},
		"imm_rc.pcap": {
			1: "frame 1: 0.000000 10.77.0.2:49777 -> 10.77.0.3:4791: RC RDMA Write Only Immediate qp=0x19 psn=2058940 ackreq reth{va=0x55b6808147c0 rkey=0x7b4 dlen=64} imm=0x11111111 len=64 icrc ok",
			3: "frame 3: 0.006970 10.77.0.2:49777 -> 10.77.0.3:4791: RC RDMA Write First qp=0x19 psn=2058941 reth{va=0x55b6808147c0 rkey=0x7b4 dlen=3000} len=1024 icrc ok",
			5: "frame 5: 0.007271 10.77.0.2:49777 -> 10.77.0.3:4791: RC RDMA Write Last Immediate qp=0x19 psn=2058943 ackreq imm=0x22222222 len=952 icrc ok",
		},
		"read_lat.pcap": {
			1: "frame 1: 0.000000 10.77.0.2:50176 -> 10.77.0.3:4791: RC RDMA Read Request qp=0x20 psn=4402308 ackreq reth{va=0x55db489be000 rkey=0xeba dlen=64} len=0 icrc ok",
			2: "frame 2: 0.002306 10.77.0.3:50176 -> 10.77.0.2:4791: RC RDMA Read Response Only qp=0x20 psn=4402308 aeth{ACK syn=0x1f msn=1} len=64 icrc ok",
		},
		"ud_pingpong.pcap": {
			1: "frame 1: 0.000000 10.77.0.2:55758 -> 10.77.0.3:4791: UD Send Only qp=0x16 psn=8929262 deth{qkey=0x11111111 srcqp=0x16} len=512 icrc ok",
		},
		"send_bw.pcap": {
			2: "frame 2: 0.000310 10.77.0.2:49881 -> 10.77.0.3:4791: RC Send Last qp=0x1b psn=2431345 ackreq len=1024 icrc ok",
		},
	}
	for name, want := range golden {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runCmd(t, "decode", filepath.Join(testcaps.Dir(), name))
			require.Equal(t, exitOK, code, stderr)
			ls := lines(stdout)
			for n, line := range want {
				require.Equal(t, line, ls[n-1])
			}
		})
	}
}

// TestDecodeAtomicFields checks the first frame of atomic_fadd.pcap field
// by field against what wire parses from it.
func TestDecodeAtomicFields(t *testing.T) {
	c := loadCapture(t, "atomic_fadd.pcap")
	p := parseFrame(t, c.Frames[0])
	require.Equal(t, wire.RCFetchAdd, p.BTH.OpCode())
	require.NotNil(t, p.AtomicETH)
	a := p.AtomicETH

	code, stdout, _ := runCmd(t, "decode", c.Path)
	require.Equal(t, exitOK, code)
	first := lines(stdout)[0]
	require.True(t, strings.HasPrefix(first, "frame 1: 0.000000 "), first)
	require.Contains(t, first, ": RC Fetch Add ")
	require.Contains(t, first, fmt.Sprintf(" qp=%#x psn=%d ackreq ", p.BTH.DestQP(), p.BTH.PSN()))
	require.Contains(t, first, fmt.Sprintf(" atomic{va=%#x rkey=%#x add=%#x cmp=%#x} ",
		a.VirtualAddress(), a.RKey(), a.SwapAddData(), a.CompareData()))
	require.True(t, strings.HasSuffix(first, " len=0 icrc ok"), first)
}

// TestDecodeVerbose checks that -v adds the IP fields, pad and ICRC.
func TestDecodeVerbose(t *testing.T) {
	c := loadCapture(t, "imm_rc.pcap")
	p := parseFrame(t, c.Frames[0])
	code, stdout, _ := runCmd(t, "decode", "-v", c.Path)
	require.Equal(t, exitOK, code)
	first := lines(stdout)[0]
	require.Contains(t, first, " pkey=0xffff ")
	require.True(t, strings.HasSuffix(first, fmt.Sprintf(
		" len=64 pad=0 ip{id=0x%04x tos=0x00 ttl=64 df} icrc ok (0x%08x)", p.Net.ID, p.ICRC)), first)
}

// TestDecodeFlippedPayloadBit corrupts one payload bit of one frame: the
// ICRC no longer matches, decode names the frame and exits 1.
func TestDecodeFlippedPayloadBit(t *testing.T) {
	c := loadCapture(t, "rc_pingpong.pcap")
	recs := recsOf(c)
	bad := -1
	for i, f := range c.Frames {
		if p := parseFrame(t, f); len(p.Payload) >= 16 {
			bad = i
			break
		}
	}
	require.GreaterOrEqual(t, bad, 0, "no frame with payload")
	f := c.Frames[bad]
	ip := f.IP()
	p := parseFrame(t, f)
	// The payload starts after the IP, UDP, BTH and extension headers.
	off := p.Net.IPHeaderSize() + wire.UDPHeaderSize + p.Info().HdrLen
	require.Same(t, &ip[off], &p.Payload[0], "payload offset")
	ethLen := len(f.Data) - len(ip)
	data := bytes.Clone(f.Data)
	data[ethLen+off+len(p.Payload)/2] ^= 0x10
	recs[bad].data = data

	var q wire.Packet
	require.Equal(t, wire.DropBadICRC, wire.Parse(data[ethLen:], &q), "the flip breaks the ICRC")

	path := writePcap(t, "flipped.pcap", layers.LinkTypeEthernet, recs)
	code, stdout, stderr := runCmd(t, "decode", path)
	require.Equal(t, exitFailure, code, stdout)
	require.Empty(t, stderr)
	ls := lines(stdout)
	n := len(c.Frames)
	require.Len(t, ls, n+1)
	badLine := ls[bad]
	require.True(t, strings.HasPrefix(badLine, fmt.Sprintf("frame %d: ", f.Index)), badLine)
	require.Contains(t, badLine, fmt.Sprintf(": %s qp=%#x psn=%d", p.BTH.OpCode(), p.BTH.DestQP(), p.BTH.PSN()))
	require.Contains(t, badLine, fmt.Sprintf(" len=%d icrc BAD (stored 0x%08x, computed ", len(p.Payload), p.ICRC))
	require.True(t, strings.HasSuffix(badLine, " DROP ICRC mismatch"), badLine)
	for i, l := range ls[:n] {
		if i != bad {
			require.True(t, strings.HasSuffix(l, " icrc ok"), l)
		}
	}
	require.Equal(t, summary(path, n, n, n-1, 1, 0), ls[n])

	// With a good file beside it, the status is still 1 and the total
	// counts the bad packet.
	code, stdout, _ = runCmd(t, "decode", c.Path, path)
	require.Equal(t, exitFailure, code)
	ls = lines(stdout)
	require.Equal(t, fmt.Sprintf("total: 2 files, %d packets, %d RoCEv2, %d ok, 1 bad, 0 not RoCEv2", 2*n, 2*n, 2*n-1), ls[len(ls)-1])
}

// TestDecodeUnreadable: files that are not captures, or are cut short,
// give exit status 2 and a message naming the file.
func TestDecodeUnreadable(t *testing.T) {
	c := loadCapture(t, "atomic_fadd.pcap")
	whole, err := os.ReadFile(c.Path)
	require.NoError(t, err)
	const hdr, recHdr = 24, 16
	firstEnd := hdr + recHdr + len(c.Frames[0].Data)

	linkType := func(lt uint32) []byte {
		b := bytes.Clone(whole[:hdr])
		binary.LittleEndian.PutUint32(b[20:], lt)
		return b
	}
	tests := []struct {
		name   string
		data   []byte
		stderr string
		stdout []string // expected stdout lines; %s is the path
	}{
		{name: "garbage", data: []byte("this is not a capture file, just text\n"), stderr: "not a pcap or pcapng file"},
		{name: "empty", data: nil, stderr: "not a pcap or pcapng file"},
		{name: "short header", data: whole[:10], stderr: "not a pcap or pcapng file"},
		{name: "cut in first record header", data: whole[:hdr+8], stderr: "frame 1: unexpected EOF",
			stdout: []string{"%s: 0 packets, 0 RoCEv2, 0 ok, 0 bad, 0 not RoCEv2 (incomplete)"}},
		{name: "cut in first frame", data: whole[:hdr+recHdr+20], stderr: "frame 1: unexpected EOF",
			stdout: []string{"%s: 0 packets, 0 RoCEv2, 0 ok, 0 bad, 0 not RoCEv2 (incomplete)"}},
		{name: "cut after record header", data: whole[:firstEnd+recHdr], stderr: "frame 2: unexpected EOF",
			stdout: []string{"frame 1: ", "%s: 1 packets, 1 RoCEv2, 1 ok, 0 bad, 0 not RoCEv2 (incomplete)"}},
		{name: "cut in second frame", data: whole[:firstEnd+recHdr+30], stderr: "frame 2: unexpected EOF",
			stdout: []string{"frame 1: ", "%s: 1 packets, 1 RoCEv2, 1 ok, 0 bad, 0 not RoCEv2 (incomplete)"}},
		{name: "802.11 link type", data: linkType(105), stderr: "unsupported link type 105"},
		{name: "link type above 255", data: linkType(276), stderr: "unsupported link type 276"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, "bad.pcap", tc.data)
			code, stdout, stderr := runCmd(t, "decode", path)
			require.Equal(t, exitUsage, code, "stdout:\n%s", stdout)
			require.Contains(t, stderr, "softhca decode: "+path+": ")
			require.Contains(t, stderr, tc.stderr)
			if tc.stdout == nil {
				require.Empty(t, stdout)
				return
			}
			ls := lines(stdout)
			require.Len(t, ls, len(tc.stdout))
			for i, want := range tc.stdout {
				if strings.Contains(want, "%s") {
					require.Equal(t, fmt.Sprintf(want, path), ls[i])
				} else {
					require.True(t, strings.HasPrefix(ls[i], want), ls[i])
				}
			}
		})
	}

	t.Run("missing file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "nope.pcap")
		code, stdout, stderr := runCmd(t, "decode", path)
		require.Equal(t, exitUsage, code)
		require.Empty(t, stdout)
		require.Contains(t, stderr, "no such file")
	})

	t.Run("good and garbage", func(t *testing.T) {
		path := writeFile(t, "bad.pcap", []byte("garbage garbage garbage garbage"))
		code, stdout, stderr := runCmd(t, "decode", c.Path, path)
		require.Equal(t, exitUsage, code)
		require.Contains(t, stderr, path)
		n := len(c.Frames)
		ls := lines(stdout)
		require.Len(t, ls, n+2)
		require.Equal(t, summary(c.Path, n, n, n, 0, 0), ls[n])
		require.Equal(t, fmt.Sprintf("total: 2 files, %d packets, %d RoCEv2, %d ok, 0 bad, 0 not RoCEv2", n, n, n), ls[n+1])
	})
}

// TestDecodeLinkTypes writes the frames of a capture with other framings
// and file formats: the decoded lines must be those of the original.
func TestDecodeLinkTypes(t *testing.T) {
	c := loadCapture(t, "imm_rc.pcap")
	code, stdout, _ := runCmd(t, "decode", c.Path)
	require.Equal(t, exitOK, code)
	want := lines(stdout)
	want = want[:len(want)-1] // without the summary line

	// reframe replaces each Ethernet header with a link-layer header.
	reframe := func(link func(ip []byte) []byte) []rec {
		recs := recsOf(c)
		for i := range recs {
			recs[i].data = link(c.Frames[i].IP())
		}
		return recs
	}
	raw := func(ip []byte) []byte { return ip }
	sll := func(ip []byte) []byte {
		h := make([]byte, sllHeaderSize, sllHeaderSize+len(ip))
		binary.BigEndian.PutUint16(h[0:], 0) // packet type: to us
		binary.BigEndian.PutUint16(h[2:], 1) // ARPHRD_ETHER
		binary.BigEndian.PutUint16(h[4:], 6) // address length
		copy(h[6:], c.Frames[0].Data[6:12])
		binary.BigEndian.PutUint16(h[14:], etherTypeIPv4)
		return append(h, ip...)
	}
	null := func(order binary.ByteOrder) func(ip []byte) []byte {
		return func(ip []byte) []byte {
			h := make([]byte, loopHeaderSize, loopHeaderSize+len(ip))
			order.PutUint32(h, 2) // AF_INET
			return append(h, ip...)
		}
	}
	vlan := func(ip []byte) []byte {
		h := bytes.Clone(c.Frames[0].Data[:12])
		h = binary.BigEndian.AppendUint16(h, etherTypeVLAN)
		h = binary.BigEndian.AppendUint16(h, 100) // VLAN ID
		h = binary.BigEndian.AppendUint16(h, etherTypeIPv4)
		return append(h, ip...)
	}

	files := map[string]func(t *testing.T) string{
		"raw 101":   func(t *testing.T) string { return writePcap(t, "x.pcap", layers.LinkTypeRaw, reframe(raw)) },
		"raw 12":    func(t *testing.T) string { return writePcap(t, "x.pcap", linkTypeRawDLT12, reframe(raw)) },
		"raw 14":    func(t *testing.T) string { return writePcap(t, "x.pcap", linkTypeRawDLT14, reframe(raw)) },
		"ipv4 228":  func(t *testing.T) string { return writePcap(t, "x.pcap", layers.LinkTypeIPv4, reframe(raw)) },
		"linux sll": func(t *testing.T) string { return writePcap(t, "x.pcap", layers.LinkTypeLinuxSLL, reframe(sll)) },
		"null": func(t *testing.T) string {
			return writePcap(t, "x.pcap", layers.LinkTypeNull, reframe(null(binary.LittleEndian)))
		},
		"loop": func(t *testing.T) string {
			return writePcap(t, "x.pcap", layers.LinkTypeLoop, reframe(null(binary.BigEndian)))
		},
		"ethernet vlan": func(t *testing.T) string { return writePcap(t, "x.pcap", layers.LinkTypeEthernet, reframe(vlan)) },
		"pcap nanosecond": func(t *testing.T) string {
			var buf bytes.Buffer
			w := pcapgo.NewWriterNanos(&buf)
			require.NoError(t, w.WriteFileHeader(65536, layers.LinkTypeEthernet))
			for _, r := range recsOf(c) {
				require.NoError(t, w.WritePacket(r.ci(), r.data))
			}
			return writeFile(t, "x.pcap", buf.Bytes())
		},
		"pcap gzip": func(t *testing.T) string {
			b, err := os.ReadFile(c.Path)
			require.NoError(t, err)
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			_, err = zw.Write(b)
			require.NoError(t, err)
			require.NoError(t, zw.Close())
			return writeFile(t, "x.pcap.gz", buf.Bytes())
		},
		"pcapng ethernet": func(t *testing.T) string { return writePcapng(t, layers.LinkTypeEthernet, recsOf(c)) },
		"pcapng raw":      func(t *testing.T) string { return writePcapng(t, layers.LinkTypeRaw, reframe(raw)) },
	}
	for name, file := range files {
		t.Run(name, func(t *testing.T) {
			path := file(t)
			code, stdout, stderr := runCmd(t, "decode", path)
			require.Equal(t, exitOK, code, stderr)
			got := lines(stdout)
			n := len(c.Frames)
			require.Equal(t, summary(path, n, n, n, 0, 0), got[len(got)-1])
			require.Equal(t, want, got[:len(got)-1])
		})
	}
}

func writePcapng(t *testing.T, lt layers.LinkType, recs []rec) string {
	t.Helper()
	var buf bytes.Buffer
	w, err := pcapgo.NewNgWriter(&buf, lt)
	require.NoError(t, err)
	for _, r := range recs {
		require.NoError(t, w.WritePacket(r.ci(), r.data))
	}
	require.NoError(t, w.Flush())
	return writeFile(t, "x.pcapng", buf.Bytes())
}

// Helpers to build frames that no rxe capture has.

var (
	testSrc4 = netip.MustParseAddr("10.0.0.1")
	testDst4 = netip.MustParseAddr("10.0.0.2")
	testSrc6 = netip.MustParseAddr("fe80::1")
	testDst6 = netip.MustParseAddr("fe80::2")
)

// ether puts an Ethernet header in front of a payload.
func ether(etherType uint16, payload []byte) []byte {
	h := []byte{0x52, 0x54, 0, 0, 0, 2, 0x52, 0x54, 0, 0, 0, 1}
	h = binary.BigEndian.AppendUint16(h, etherType)
	return append(h, payload...)
}

// roce builds an Ethernet frame holding a good RoCEv2 packet.
func roce(n wire.Net, op wire.OpCode, qpn uint32, psn wire.PSN, payload []byte) []byte {
	n.DstPort = wire.RoCEv2Port
	n.HopLimit = 64
	n.DontFragment = !n.IsIPv6()
	h := wire.Headers{BTH: wire.BTHFields{OpCode: op, PKey: 0xffff, DestQP: qpn, PSN: psn, AckReq: true}}
	ip := wire.AppendFrame(nil, &n, &h, payload)
	et := uint16(etherTypeIPv4)
	if n.IsIPv6() {
		et = etherTypeIPv6
	}
	return ether(et, ip)
}

// udp4 builds an Ethernet frame holding an IPv4 UDP datagram; the
// protocol byte and the flags/fragment word can then be altered.
func udp4(dstPort uint16, udpPayload []byte) []byte {
	n := wire.Net{Src: testSrc4, Dst: testDst4, SrcPort: 49152, DstPort: dstPort, HopLimit: 64}
	b := make([]byte, wire.IPv4HeaderSize+wire.UDPHeaderSize+len(udpPayload))
	k := wire.EncodeIPUDP(b, &n, len(udpPayload))
	copy(b[k:], udpPayload)
	return ether(etherTypeIPv4, b)
}

// TestDecodeMixed decodes a capture that mixes RoCEv2 over IPv4 and IPv6
// with other traffic and with packets wire.Parse drops.
func TestDecodeMixed(t *testing.T) {
	n4 := wire.Net{Src: testSrc4, Dst: testDst4, SrcPort: 0xc001}
	n6 := wire.Net{Src: testSrc6, Dst: testDst6, SrcPort: 0xc002}

	arp := ether(etherTypeARP, make([]byte, 28))
	dns := udp4(53, []byte("query"))
	tcp := udp4(80, make([]byte, 20))
	tcp[ethernetHeaderSize+9] = 6
	frag := udp4(wire.RoCEv2Port, make([]byte, 16))
	binary.BigEndian.PutUint16(frag[ethernetHeaderSize+6:], 0x0010) // offset 128 bytes
	lldp := ether(0x88cc, make([]byte, 40))

	badTVer := roce(n4, wire.RCSendOnly, 0x11, 7, []byte("hi"))
	badTVer[ethernetHeaderSize+wire.IPv4HeaderSize+wire.UDPHeaderSize+1] |= 1
	reserved := roce(n4, wire.RCSendOnly, 0x11, 8, nil)
	reserved[ethernetHeaderSize+wire.IPv4HeaderSize+wire.UDPHeaderSize] = 0x1f
	shortBTH := udp4(wire.RoCEv2Port, make([]byte, 8))
	snapped := roce(n4, wire.RCRDMAWriteOnly, 0x11, 9, make([]byte, 64))

	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	frames := [][]byte{
		roce(n4, wire.RCSendOnly, 0x11, 5, []byte("hello")), // 1
		arp, // 2
		roce(n6, wire.RCSendOnly, 0x12, 6, []byte("hello")), // 3
		dns,      // 4
		tcp,      // 5
		frag,     // 6
		lldp,     // 7
		badTVer,  // 8
		reserved, // 9
		shortBTH, // 10
		snapped,  // 11
	}
	recs := make([]rec, len(frames))
	for i, f := range frames {
		recs[i] = rec{time: base.Add(time.Duration(i) * 250 * time.Microsecond), data: f}
	}
	recs[10].origLen = len(snapped)
	recs[10].data = snapped[:60]
	path := writePcap(t, "mixed.pcap", layers.LinkTypeEthernet, recs)

	roceLines := []string{
		"frame 1: 0.000000 10.0.0.1:49153 -> 10.0.0.2:4791: RC Send Only qp=0x11 psn=5 ackreq len=5 icrc ok",
		"frame 3: 0.000500 [fe80::1]:49154 -> [fe80::2]:4791: RC Send Only qp=0x12 psn=6 ackreq len=5 icrc ok",
		"frame 8: 0.001750 10.0.0.1:49153 -> 10.0.0.2:4791: RC Send Only qp=0x11 psn=7 ackreq tver=1 DROP bad TVer",
		"frame 9: 0.002000 10.0.0.1:49153 -> 10.0.0.2:4791: reserved 0x1f qp=0x11 psn=8 ackreq DROP reserved opcode",
		"frame 10: 0.002250 10.0.0.1:49152 -> 10.0.0.2:4791: DROP truncated",
		fmt.Sprintf("frame 11: 0.002500 10.0.0.1:49153 -> 10.0.0.2:4791: RC RDMA Write Only qp=0x11 psn=9 ackreq (captured 60 of %d bytes) DROP bad IP header", len(snapped)),
	}
	sum := summary(path, 11, 6, 2, 4, 5)

	code, stdout, stderr := runCmd(t, "decode", path)
	require.Equal(t, exitFailure, code)
	require.Empty(t, stderr)
	require.Equal(t, append(roceLines, sum), lines(stdout))

	verbose := []string{
		"frame 2: 0.000250 not RoCEv2: ARP",
		"frame 4: 0.000750 not RoCEv2: UDP 10.0.0.1:49152 -> 10.0.0.2:53",
		"frame 5: 0.001000 not RoCEv2: TCP 10.0.0.1 -> 10.0.0.2",
		"frame 6: 0.001250 not RoCEv2: IPv4 fragment 10.0.0.1 -> 10.0.0.2",
		"frame 7: 0.001500 not RoCEv2: ethertype 0x88cc",
	}
	code, stdout, _ = runCmd(t, "decode", "-v", path)
	require.Equal(t, exitFailure, code)
	got := lines(stdout)
	require.Len(t, got, 12)
	require.Equal(t, sum, got[11])
	for _, want := range verbose {
		require.Contains(t, got, want)
	}
	require.True(t, strings.HasPrefix(got[2], "frame 3: 0.000500 [fe80::1]:49154 -> [fe80::2]:4791: RC Send Only qp=0x12 psn=6 ackreq pkey=0xffff len=5 pad=3 ip{tclass=0x00 flow=0x0 hlim=64} icrc ok (0x"), got[2])
}
