package testbench

import (
	"testing"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

func TestSmoke(t *testing.T) {
	tb := New(t)
	c := tb.NewRC(t)
	mem := tb.Mem(t, 4096, AllAccess)
	c.PostRecv(t, 1, mem.SGE(0, 100))
	psn := c.SendPSN
	c.Send(t, Pkt{Op: wire.RCSendOnly, AckReq: true, Payload: []byte("hello")})
	c.Expect(t, ACK(psn).WithMSN(1))
	wc := c.RecvCQ.Next(t)
	RequireWC(t, wc, 1, verbs.WCSuccess, verbs.WCRecv)
	require.Equal(t, "hello", string(mem.Buf[:5]))
	tb.Barrier(t)
	c.Barrier(t)
}
