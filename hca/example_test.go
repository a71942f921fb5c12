package hca_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/verbs"
)

// Example opens two devices on this machine, connects an RC queue pair
// on each to the other, and sends a message from A to B.
func Example() {
	// Each device sends and receives RoCEv2 over its own UDP socket
	// (link): here 127.0.0.1 and 127.0.0.2, on ports the kernel picks,
	// and each device sends to its peer's port. On a network, each host
	// binds its own address at port 4791 and leaves PeerPort zero.
	linkA := must(udp.Open(udp.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")}))
	linkB := must(udp.Open(udp.Config{Addr: netip.MustParseAddrPort("127.0.0.2:0")}))
	devA := must(hca.Open(hca.Config{Link: linkA, PeerPort: port(linkB)}))
	defer devA.Close() // closes linkA too
	devB := must(hca.Open(hca.Config{Link: linkB, PeerPort: port(linkA)}))
	defer devB.Close()

	// On each device: a protection domain, a buffer registered in it, a
	// completion queue and an RC queue pair.
	type side struct {
		mr *hca.MR
		cq *hca.CQ
		qp *hca.QP
	}
	create := func(dev *hca.Device) side {
		pd := must(dev.AllocPD())
		mr := must(pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite))
		cq := must(dev.CreateCQ(16, nil, nil, 0))
		qp := must(pd.CreateQP(&hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeRC,
			Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}}))
		return side{mr, cq, qp}
	}
	a, b := create(devA), create(devB)

	// Connect each QP to the other (RESET -> INIT -> RTR -> RTS): what
	// two programs would exchange over the network first (QP number,
	// first PSN, GID) is at hand here. GID 1 is a device's address.
	check(a.qp.Connect(hca.Remote{QPN: b.qp.Num(), GID: must(devB.QueryGID(1, 1))}, nil))
	check(b.qp.Connect(hca.Remote{QPN: a.qp.Num(), GID: must(devA.QueryGID(1, 1))}, nil))

	// B posts a receive buffer; A sends a message into it.
	must(b.qp.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{b.mr.SGE(0, 4096)}}))
	n := copy(a.mr.Bytes(), "hello, B")
	must(a.qp.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, n)}}))

	// Wait for the completions: A's send (once B acknowledged it) and
	// B's receive.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	must(a.cq.PollWait(ctx, wc))
	fmt.Printf("A: wr_id %d %s %s\n", wc[0].WRID, wc[0].Opcode, wc[0].Status)
	must(b.cq.PollWait(ctx, wc))
	fmt.Printf("B: wr_id %d %s %s: %q\n", wc[0].WRID, wc[0].Opcode, wc[0].Status, b.mr.Bytes()[:wc[0].ByteLen])
	// Output:
	// A: wr_id 2 SEND success
	// B: wr_id 1 RECV success: "hello, B"
}

// port returns the UDP port a link is bound to.
func port(l *udp.Link) uint16 { return must(l.LocalAddr()).SrcPort }

// must and check stop the example at the first error; a program would
// handle it. Every error wraps the errno libibverbs would return:
// errors.Is(err, syscall.EINVAL).
func must[T any](v T, err error) T {
	check(err)
	return v
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}
