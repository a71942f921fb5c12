package pipe_test

import (
	"fmt"
	"time"

	"github.com/softhca/softhca/internal/clock"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/pipe"
)

// A pipe with a 5 ms delay on a fake clock, whose filter drops the first
// packet A sends.
func Example() {
	clk := clock.NewFake(time.Unix(0, 0))
	a, b := pipe.New(pipe.Config{Clock: clk, Faults: pipe.Faults{Delay: 5 * time.Millisecond}})
	defer a.Close()
	defer b.Close()

	first := true
	a.SetFilter(func(p *link.Packet) pipe.Verdict {
		if first {
			first = false
			return pipe.Drop
		}
		return pipe.Pass
	})
	_ = a.Send([]link.Packet{{Buf: []byte("lost")}, {Buf: []byte("hello")}})

	pkts := []link.Packet{{Buf: make([]byte, 0, link.MaxPacketSize)}}
	n, _ := b.TryRecv(pkts)
	fmt.Println("before the delay:", n)
	clk.Advance(5 * time.Millisecond)
	n, _ = b.Recv(pkts)
	fmt.Printf("after: %d %q from %v to %v\n", n, pkts[0].Buf, pkts[0].Net.Src, pkts[0].Net.Dst)
	fmt.Println("dropped by the filter:", a.Stats().InjectedLoss)
	// Output:
	// before the delay: 0
	// after: 1 "hello" from 10.0.0.1 to 10.0.0.2
	// dropped by the filter: 1
}
