package testbench

import (
	"net"
	"sync"
	"time"

	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/wire"
)

// Link is the fake link.Link the DUT is opened on. The testbench owns the
// other end: Inject queues a datagram for the DUT's Recv, and every packet
// the DUT Sends is copied into a FIFO that Next reads (Sent signals each
// arrival). It never drops, reorders or delays anything on its own: what
// the DUT receives is exactly what the test injected, in order.
//
// Every method is safe for concurrent use.
type Link struct {
	local wire.Net

	mu       sync.Mutex
	in       []link.Packet // injected, not yet read by the DUT; protected by mu
	out      []Captured    // sent by the DUT, not yet taken; protected by mu
	stats    link.Stats    // protected by mu
	held     bool          // Hold: injected datagrams wait for Release; protected by mu
	inReady  chan struct{} // size 1: something was injected
	outReady chan struct{} // size 1: the DUT sent something
	done     chan struct{}
	once     sync.Once
}

// Captured is one packet the DUT sent: a copy of its bytes (BTH through
// ICRC) and the IP/UDP fields the DUT handed to the link.
type Captured struct {
	Buf []byte
	Net wire.Net
}

// NewLink returns a link whose LocalAddr is local (the DUT's address).
func NewLink(local wire.Net) *Link {
	return &Link{
		local:    local,
		inReady:  make(chan struct{}, 1),
		outReady: make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
}

// Inject queues a datagram for the DUT: pkt is the InfiniBand packet (BTH
// through ICRC), n the addresses and ports the DUT's Recv reports with it.
// pkt is copied.
func (l *Link) Inject(pkt []byte, n wire.Net) {
	l.mu.Lock()
	l.in = append(l.in, link.Packet{Buf: append([]byte(nil), pkt...), Net: n})
	l.mu.Unlock()
	signal(l.inReady)
}

// Hold makes the datagrams injected from now on wait until Release, which
// hands them to the DUT together: the DUT then reads them in one batch
// and handles them in one turn of its worker, before it sends anything
// they cause (a test of what the DUT does with packets that arrive
// together).
func (l *Link) Hold() {
	l.mu.Lock()
	l.held = true
	l.mu.Unlock()
}

// Release ends Hold.
func (l *Link) Release() {
	l.mu.Lock()
	l.held = false
	l.mu.Unlock()
	signal(l.inReady)
}

// Next returns the oldest packet the DUT sent and has not been taken,
// waiting up to timeout for one. It reports false when none arrived.
func (l *Link) Next(timeout time.Duration) (Captured, bool) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		if c, ok := l.TryNext(); ok {
			return c, true
		}
		select {
		case <-l.outReady:
		case <-timer.C:
			return l.TryNext()
		}
	}
}

// TryNext returns the oldest packet the DUT sent and has not been taken,
// without waiting.
func (l *Link) TryNext() (Captured, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.out) == 0 {
		return Captured{}, false
	}
	c := l.out[0]
	l.out[0] = Captured{}
	l.out = l.out[1:]
	return c, true
}

// Sent is signalled (it has a buffer of one) whenever the DUT sends.
func (l *Link) Sent() <-chan struct{} { return l.outReady }

// Pending returns how many packets the DUT sent that were not taken yet.
func (l *Link) Pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.out)
}

// Send implements link.Link: the DUT's packets are copied into the FIFO.
func (l *Link) Send(pkts []link.Packet) error {
	select {
	case <-l.done:
		return net.ErrClosed
	default:
	}
	l.mu.Lock()
	for _, p := range pkts {
		l.out = append(l.out, Captured{Buf: append([]byte(nil), p.Buf...), Net: p.Net})
		l.stats.TxPackets++
		l.stats.TxBytes += uint64(len(p.Buf))
	}
	l.mu.Unlock()
	signal(l.outReady)
	return nil
}

// Recv implements link.Link: it hands the DUT the injected datagrams in
// the order they were injected.
func (l *Link) Recv(pkts []link.Packet) (int, error) {
	for {
		l.mu.Lock()
		n := 0
		for n < len(pkts) && len(l.in) > 0 && !l.held {
			src := l.in[0]
			l.in[0] = link.Packet{}
			l.in = l.in[1:]
			buf := pkts[n].Buf[:cap(pkts[n].Buf)]
			if len(src.Buf) > len(buf) {
				l.stats.RxTruncated++
				continue
			}
			pkts[n].Buf = buf[:copy(buf, src.Buf)]
			pkts[n].Net = src.Net
			l.stats.RxPackets++
			l.stats.RxBytes += uint64(len(src.Buf))
			n++
		}
		l.mu.Unlock()
		if n > 0 {
			return n, nil
		}
		select {
		case <-l.inReady:
		case <-l.done:
			return 0, net.ErrClosed
		}
	}
}

// LocalAddr implements link.Link.
func (l *Link) LocalAddr() (wire.Net, error) { return l.local, nil }

// Stats implements link.Link.
func (l *Link) Stats() link.Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// Close implements link.Link.
func (l *Link) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
