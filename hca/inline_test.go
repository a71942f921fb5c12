package hca_test

import (
	"net/netip"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/verbs"
)

// TestInlineFromAnyAddress: with Config.InlineFromAnyAddress (the C ABI's
// setting), an IBV_SEND_INLINE request reads memory outside every
// registered region, as libibverbs does for a C program's stack buffer;
// without it, the same request completes with a local protection error.
// (Issue 14: ibv_post_send with IBV_SEND_INLINE from an unregistered
// buffer failed through the drop-in library.) The memory is an anonymous
// mapping, outside the Go heap, as a C program's is.
func TestInlineFromAnyAddress(t *testing.T) {
	mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Munmap(mem) })
	msg := []byte("inline from unregistered memory")
	copy(mem[100:], msg)
	sge := verbs.SGE{Addr: uint64(uintptr(unsafe.Pointer(&mem[100]))), Length: uint32(len(msg))}

	for _, anyAddr := range []bool{true, false} {
		la, lb := newChanPair(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"))
		a := openSideConfig(t, hca.Config{Link: la, InlineFromAnyAddress: anyAddr}, 1<<16)
		b := openSide(t, lb, 1<<16)
		connect(t, a, b, verbs.QPTypeRC, verbs.MTU1024)
		_, err := b.qp.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{b.mr.SGE(0, 256)}})
		require.NoError(t, err)
		_, err = a.qp.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WRSend,
			SendFlags: verbs.SendSignaled | verbs.SendInline, SGList: []verbs.SGE{sge}})
		require.NoError(t, err)
		copy(mem[100:], "overwritten after the post.....") // inline data was copied at post time
		wc := waitWC(t, a, 1)[0]
		if !anyAddr {
			require.Equal(t, verbs.WCLocProtErr, wc.Status, wc.Status.String())
			continue
		}
		require.Equal(t, verbs.WCSuccess, wc.Status, wc.Status.String())
		rwc := waitWC(t, b, 1)[0]
		require.Equal(t, verbs.WCSuccess, rwc.Status, rwc.Status.String())
		require.Equal(t, msg, b.buf[:rwc.ByteLen])
		copy(mem[100:], msg)
	}
}
