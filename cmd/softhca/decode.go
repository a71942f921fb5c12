package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/softhca/softhca/wire"
)

const decodeUsage = `usage: softhca decode [-v] FILE.pcap...

Print one line per RoCEv2 frame (UDP to port 4791) of each capture, parsed
and ICRC-checked by softhca's wire package, then a summary per file and,
for several files, a total. Frames that fail to parse end in "DROP <reason>".
pcap (Ethernet, raw IP, Linux cooked, loopback) and pcapng are read.

A capture on loopback (tcpdump -i lo) shows what softhca sends with UDP GSO
before the kernel splits it: several RoCEv2 packets back to back in one
datagram. decode recognises such a GSO super-datagram and prints each of
its packets on a line of its own, marked "gso K/N".

Examples:

  softhca decode demo.pcap                      # demo -pcap's packets, a line each, then a summary
  softhca decode -v lo.pcapng                   # with IP fields and ICRC, and the other frames
  softhca decode a.pcap b.pcap                  # a summary per file, then a total

Exit status: 0 if every RoCEv2 packet is good, 1 if any was dropped,
2 on usage errors or unreadable files.

Flags:
`

// runDecode is the decode command.
func runDecode(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("decode", flag.ContinueOnError)
	fs.SetOutput(stderr)
	verbose := fs.Bool("v", false, "also list frames that are not RoCEv2, and show the IP fields, P_Key, pad and ICRC of each packet")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), decodeUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "softhca decode: no capture files given")
		fs.Usage()
		return exitUsage
	}
	for _, path := range fs.Args() {
		if path == "" {
			// os.Open would say "open : no such file or directory".
			fmt.Fprintln(stderr, `softhca decode: a capture file named "" (an empty argument)`)
			return exitUsage
		}
	}

	out := bufio.NewWriter(stdout)
	defer out.Flush()
	d := decoder{out: out, verbose: *verbose}
	var total decodeCounts
	status := exitOK
	for _, path := range fs.Args() {
		c, err := d.decodeFile(path)
		total.add(c)
		if err != nil {
			out.Flush() // keep stdout and stderr in order on a terminal
			fmt.Fprintf(stderr, "softhca decode: %s: %v\n", path, err)
			status = exitUsage
		}
	}
	if fs.NArg() > 1 {
		fmt.Fprintf(out, "total: %d files, %s\n", fs.NArg(), total)
	}
	if status == exitOK && total.bad > 0 {
		status = exitFailure
	}
	return status
}

// decodeCounts counts the frames of one file or of all of them.
type decodeCounts struct {
	frames int // every frame in the file
	roce   int // UDP datagrams to port 4791
	ok     int // RoCEv2 packets that parsed, ICRC included
	bad    int // RoCEv2 packets wire.Parse dropped
	other  int // frames that are not RoCEv2
	// gso counts the datagrams that were GSO super-datagrams, gsoPackets
	// the packets they held (counted in ok and bad one by one).
	gso, gsoPackets int
}

func (c *decodeCounts) add(o decodeCounts) {
	c.frames += o.frames
	c.roce += o.roce
	c.ok += o.ok
	c.bad += o.bad
	c.other += o.other
	c.gso += o.gso
	c.gsoPackets += o.gsoPackets
}

// String is the body of the summary lines, e.g. "50 packets, 50 RoCEv2,
// 50 ok, 0 bad, 0 not RoCEv2", or with GSO super-datagrams "10 packets,
// 10 RoCEv2 (4 GSO super-datagrams of 10 packets), 16 ok, 0 bad, 0 not
// RoCEv2".
func (c decodeCounts) String() string {
	gso := ""
	if c.gso > 0 {
		gso = fmt.Sprintf(" (%d GSO super-datagrams of %d packets)", c.gso, c.gsoPackets)
	}
	return fmt.Sprintf("%d packets, %d RoCEv2%s, %d ok, %d bad, %d not RoCEv2",
		c.frames, c.roce, gso, c.ok, c.bad, c.other)
}

// decoder prints the frames of capture files.
type decoder struct {
	out     io.Writer
	verbose bool
	pkt     wire.Packet // reused for every frame
	line    strings.Builder
}

// decodeFile prints the frames of one file and its summary line. It
// returns the counts and, if the file could not be read to its end, why.
// The counts (and the summary) cover the frames read before the error.
func (d *decoder) decodeFile(path string) (decodeCounts, error) {
	var c decodeCounts
	f, err := os.Open(path)
	if err != nil {
		return c, err
	}
	defer f.Close()
	r, err := openCapture(f)
	if err != nil {
		return c, err
	}
	var start time.Time
	for {
		fr, err := r.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fmt.Fprintf(d.out, "%s: %s (incomplete)\n", path, c)
			return c, err
		}
		if fr.num == 1 {
			start = fr.time
		}
		d.decodeFrame(&c, &fr, fr.time.Sub(start))
	}
	fmt.Fprintf(d.out, "%s: %s\n", path, c)
	return c, nil
}

// decodeFrame classifies, counts and prints one frame.
func (d *decoder) decodeFrame(c *decodeCounts, fr *frame, rel time.Duration) {
	c.frames++
	b := &d.line
	b.Reset()
	fmt.Fprintf(b, "frame %d: %.6f ", fr.num, rel.Seconds())

	ip, what := linkPayload(fr.linkType, fr.data)
	var dg datagram
	isRoCEv2 := false
	if ip != nil {
		var ok bool
		dg, ok, what = findUDP(ip)
		switch {
		case !ok:
		case dg.isRoCEv2():
			isRoCEv2 = true
		default:
			what = fmt.Sprintf("UDP %s -> %s", dg.src, dg.dst)
		}
	}
	if !isRoCEv2 {
		c.other++
		if d.verbose {
			fmt.Fprintf(d.out, "%snot RoCEv2: %s\n", b.String(), what)
		}
		return
	}

	c.roce++
	fmt.Fprintf(b, "%s -> %s: ", dg.src, dg.dst)
	p := &d.pkt
	r := wire.Parse(ip, p)
	if segs := gsoSegments(ip, p, r); segs != nil {
		c.gso++
		c.gsoPackets += len(segs)
		prefix := b.String()
		hdr := p.Net.IPHeaderSize() + wire.UDPHeaderSize
		for k, seg := range segs {
			b.Reset()
			fmt.Fprintf(b, "%sgso %d/%d ", prefix, k+1, len(segs))
			r := wire.Parse(seg, p)
			d.result(c, p, r, seg[hdr:], fr)
		}
		return
	}
	d.result(c, p, r, dg.payload, fr)
}

// gsoSegments returns the packets of a GSO super-datagram (splitGSO),
// given what wire.Parse made of it, or nil when it is not one. Only a
// datagram whose IP and UDP headers parsed but whose InfiniBand packet
// did not can be one: its BTH is the first packet's, its length and the
// ICRC at its end are not.
func gsoSegments(ip []byte, p *wire.Packet, r wire.DropReason) [][]byte {
	switch r {
	case wire.DropBadICRC, wire.DropPayloadNotAllowed, wire.DropBadPayloadLength, wire.DropBadPad:
		return splitGSO(ip, &p.Net)
	default:
		return nil
	}
}

// result counts one RoCEv2 packet that wire.Parse parsed into p with the
// result r, and prints it after the start of its line in d.line. payload
// is the packet's UDP payload, for showing the BTH of a packet whose
// headers did not parse.
func (d *decoder) result(c *decodeCounts, p *wire.Packet, r wire.DropReason, payload []byte, fr *frame) {
	b := &d.line
	switch r {
	case wire.DropNone:
		c.ok++
		d.packet(p)
		d.verboseFields(p)
		b.WriteString(" icrc ok")
		if d.verbose {
			fmt.Fprintf(b, " (0x%08x)", p.ICRC)
		}
	case wire.DropBadICRC:
		// Everything but the ICRC parsed, so p is complete.
		c.bad++
		d.packet(p)
		d.verboseFields(p)
		end := len(p.Raw) - wire.ICRCSize
		fmt.Fprintf(b, " icrc BAD (stored 0x%08x, computed 0x%08x)", p.ICRC, wire.ICRC(&p.Net, p.Raw[:end]))
		fmt.Fprintf(b, " DROP %s", r)
	default:
		// p may hold nothing of this packet: show the BTH if it is there.
		c.bad++
		if len(payload) >= wire.BTHSize {
			d.bth(wire.BTH(payload[:wire.BTHSize]))
			b.WriteByte(' ')
		}
		if fr.origLen > len(fr.data) {
			fmt.Fprintf(b, "(captured %d of %d bytes) ", len(fr.data), fr.origLen)
		}
		fmt.Fprintf(b, "DROP %s", r)
	}
	b.WriteByte('\n')
	io.WriteString(d.out, b.String())
}

// bth writes the opcode name and the BTH fields worth showing.
func (d *decoder) bth(h wire.BTH) {
	b := &d.line
	fmt.Fprintf(b, "%s qp=%#x psn=%d", h.OpCode(), h.DestQP(), h.PSN())
	if h.AckReq() {
		b.WriteString(" ackreq")
	}
	if h.SolicitedEvent() {
		b.WriteString(" se")
	}
	if h.MigReq() {
		b.WriteString(" mig")
	}
	if h.FECN() {
		b.WriteString(" fecn")
	}
	if h.BECN() {
		b.WriteString(" becn")
	}
	if h.PKey() != 0xffff || d.verbose {
		fmt.Fprintf(b, " pkey=0x%04x", h.PKey())
	}
	if h.TVer() != 0 {
		fmt.Fprintf(b, " tver=%d", h.TVer())
	}
}

// packet writes the BTH, the extension headers in wire order and the
// payload length of a parsed packet.
func (d *decoder) packet(p *wire.Packet) {
	b := &d.line
	d.bth(p.BTH)
	if p.DETH != nil {
		fmt.Fprintf(b, " deth{qkey=%#x srcqp=%#x}", p.DETH.QKey(), p.DETH.SrcQP())
	}
	if p.FETH != nil {
		fmt.Fprintf(b, " feth{placement=%d sel=%d}", p.FETH.PlacementType(), p.FETH.Selectivity())
	}
	if p.RETH != nil {
		fmt.Fprintf(b, " reth{va=%#x rkey=%#x dlen=%d}", p.RETH.VirtualAddress(), p.RETH.RKey(), p.RETH.DMALength())
	}
	if a := p.AtomicETH; a != nil {
		// FetchAdd's "Swap (or Add) Data" is the addend.
		op := "swap"
		if p.BTH.OpCode() == wire.RCFetchAdd {
			op = "add"
		}
		fmt.Fprintf(b, " atomic{va=%#x rkey=%#x %s=%#x cmp=%#x}", a.VirtualAddress(), a.RKey(), op, a.SwapAddData(), a.CompareData())
	}
	if a := p.AETH; a != nil {
		fmt.Fprintf(b, " aeth{%s syn=0x%02x msn=%d}", a.Syndrome(), uint8(a.Syndrome()), a.MSN())
	}
	if p.AtomicAckETH != nil {
		fmt.Fprintf(b, " atomicack{orig=%#x}", p.AtomicAckETH.OriginalRemoteData())
	}
	if p.ImmDt != nil {
		fmt.Fprintf(b, " imm=0x%08x", p.ImmDt.Value())
	}
	if p.IETH != nil {
		fmt.Fprintf(b, " ieth{rkey=%#x}", p.IETH.RKey())
	}
	fmt.Fprintf(b, " len=%d", len(p.Payload))
}

// verboseFields writes, with -v, the pad and the IP fields that a normal
// line leaves out.
func (d *decoder) verboseFields(p *wire.Packet) {
	if !d.verbose {
		return
	}
	b := &d.line
	fmt.Fprintf(b, " pad=%d", p.BTH.PadCount())
	n := &p.Net
	if n.IsIPv6() {
		fmt.Fprintf(b, " ip{tclass=0x%02x flow=%#x hlim=%d}", n.TrafficClass, n.FlowLabel, n.HopLimit)
		return
	}
	fmt.Fprintf(b, " ip{id=0x%04x tos=0x%02x ttl=%d", n.ID, n.TrafficClass, n.HopLimit)
	if n.DontFragment {
		b.WriteString(" df")
	}
	b.WriteByte('}')
}
