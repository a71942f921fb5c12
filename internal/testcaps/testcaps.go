// Package testcaps gives tests the RoCEv2 packets captured between two
// Linux rdma_rxe devices (testdata/rxe at the repository root): each
// capture's frames, Ethernet header included, in capture order.
//
// It is for tests only. Frames are read once per call; callers own the
// returned slices.
package testcaps

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"time"

	"github.com/google/gopacket/pcapgo"
)

// Frame is one captured frame.
type Frame struct {
	Index int // 1-based, as Wireshark numbers frames
	Time  time.Time
	Data  []byte // starts with the Ethernet header
}

// Capture is one pcap file.
type Capture struct {
	Name   string // file name without directory, e.g. "rc_pingpong.pcap"
	Path   string
	Frames []Frame
}

// Dir returns the directory that holds the rxe captures.
func Dir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("testcaps: cannot locate source file")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "rxe")
}

// Paths returns the capture files, sorted by name.
func Paths() ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(Dir(), "*.pcap"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("testcaps: no captures in %s", Dir())
	}
	sort.Strings(paths)
	return paths, nil
}

// Load reads every capture.
func Load() ([]Capture, error) {
	paths, err := Paths()
	if err != nil {
		return nil, err
	}
	caps := make([]Capture, 0, len(paths))
	for _, p := range paths {
		c, err := Read(p)
		if err != nil {
			return nil, err
		}
		caps = append(caps, c)
	}
	return caps, nil
}

// Read reads one pcap file.
func Read(path string) (Capture, error) {
	f, err := os.Open(path)
	if err != nil {
		return Capture{}, err
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		return Capture{}, fmt.Errorf("%s: %w", path, err)
	}
	c := Capture{Name: filepath.Base(path), Path: path}
	for i := 1; ; i++ {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return c, nil
		}
		if err != nil {
			return Capture{}, fmt.Errorf("%s frame %d: %w", path, i, err)
		}
		c.Frames = append(c.Frames, Frame{Index: i, Time: ci.Timestamp, Data: append([]byte(nil), data...)})
	}
}

// EthernetHeaderSize is the length of an untagged Ethernet II header.
const EthernetHeaderSize = 14

// IP returns the frame after its Ethernet header, or nil when the frame is
// not IPv4 or IPv6 (ARP, say).
func (f Frame) IP() []byte {
	d := f.Data
	if len(d) < EthernetHeaderSize {
		return nil
	}
	switch uint16(d[12])<<8 | uint16(d[13]) {
	case 0x0800, 0x86dd:
		return d[EthernetHeaderSize:]
	}
	return nil
}
