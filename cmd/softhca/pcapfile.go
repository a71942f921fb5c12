package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/wire"
	"github.com/softhca/softhca/wire/pcap"
)

// pcapFile is the -w file of pingpong and perf: every packet the device
// sends and receives, written from inside softhca through the device's
// Trace hook (hca.Config.Trace), one Ethernet frame per RoCEv2 packet,
// as demo -pcap writes them. Unlike a capture on loopback, which sees a
// UDP GSO send as one datagram before the kernel splits it, each packet
// is a frame of its own with its own IP and UDP headers (and, for IPv4,
// the Identification its ICRC was computed for), so that Wireshark's
// InfiniBand dissector and softhca decode take each one as it is.
//
// The trace hook runs on the device's goroutines, several at a time; a
// mutex orders the writes. The first write error stops the writing and
// is reported by close.
type pcapFile struct {
	path string
	f    *os.File
	buf  *bufio.Writer
	w    *pcap.Writer

	mu  sync.Mutex
	n   int   // packets written
	err error // the first write error
}

// createPcapFile creates (or truncates) path and writes the pcap file
// header.
func createPcapFile(path string) (*pcapFile, error) {
	if path == "" {
		return nil, errors.New("-w: no file name")
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("-w: %w", err)
	}
	buf := bufio.NewWriter(f)
	w, err := pcap.NewWriter(buf)
	if err == nil {
		err = buf.Flush()
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("-w %s: %w", path, err)
	}
	return &pcapFile{path: path, f: f, buf: buf, w: w}, nil
}

// trace is the device's Trace hook: it writes p, sent or received.
func (c *pcapFile) trace(_ hca.Direction, p *link.Packet) {
	if len(p.Buf) < wire.BTHSize {
		return
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	if err := c.w.WritePacket(now, &p.Net, p.Buf); err != nil {
		c.err = err
		return
	}
	c.n++
}

// close flushes and closes the file. It returns how many packets were
// written and the first error writing them, flushing or closing. Call it
// once the device is closed: no trace may run after it.
func (c *pcapFile) close() (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.err
	if ferr := c.buf.Flush(); err == nil {
		err = ferr
	}
	if cerr := c.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return c.n, fmt.Errorf("-w %s: %w", c.path, err)
	}
	return c.n, nil
}

// note is the line that says where the packets went and how to look at
// them; ports are the UDP ports of the two devices.
func (c *pcapFile) note(n int, ports ...uint16) string {
	var uniq []uint16
	for _, p := range ports {
		if !slices.Contains(uniq, p) {
			uniq = append(uniq, p)
		}
	}
	s := fmt.Sprintf("wrote %d packets to %s; look at them with: %s", n, c.path, tsharkCommand(c.path, uniq))
	if len(uniq) == 1 && uniq[0] == wire.RoCEv2Port {
		s += " or softhca decode " + c.path
	}
	return s
}
