package cq

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softhca/softhca/verbs"
)

// newChannel returns a channel closed at the end of the test (after the
// CQs created later, whose cleanups run first).
func newChannel(t *testing.T) *Channel {
	t.Helper()
	ch, err := NewChannel()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ch.Close() })
	return ch
}

// newCQ returns a CQ destroyed at the end of the test if still alive.
func newCQ(t *testing.T, cfg Config) *CQ {
	t.Helper()
	if cfg.MaxCQE == 0 {
		cfg.MaxCQE = 1 << 16
	}
	c, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		for c.Users() > 0 {
			c.RemoveUser()
		}
		c.AckEvents(c.UnackedEvents())
		_ = c.Destroy(context.Background())
	})
	return c
}

// wc returns a successful receive completion with the given wr_id.
func wc(id uint64) *verbs.WC {
	return &verbs.WC{WRID: id, Status: verbs.WCSuccess, Opcode: verbs.WCRecv, ByteLen: uint32(id)}
}

// readable reports whether fd polls readable right now (timeout 0).
func readable(t *testing.T, fd int) bool {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		require.NoError(t, err)
		return n == 1 && fds[0].Revents&unix.POLLIN != 0
	}
}

// requireErrno requires err to be a *verbs.Error for op with errno.
func requireErrno(t *testing.T, err error, op string, errno syscall.Errno) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, errno)
	var ve *verbs.Error
	require.ErrorAs(t, err, &ve)
	require.Equal(t, op, ve.Op)
	require.Equal(t, errno, ve.Errno)
}

// fire arms c for any completion, pushes one and takes the event, leaving
// it reported and unacknowledged.
func fire(t *testing.T, c *CQ, id uint64) {
	t.Helper()
	require.NoError(t, c.ReqNotify(false))
	require.True(t, c.Push(wc(id), false))
	got, err := c.Channel().GetEvent(context.Background())
	require.NoError(t, err)
	require.Same(t, c, got)
}

// pollIDs drains c and returns the wr_ids in order.
func pollIDs(c *CQ) []uint64 {
	var ids []uint64
	buf := make([]verbs.WC, 3)
	for {
		n := c.Poll(buf)
		if n == 0 {
			return ids
		}
		for _, w := range buf[:n] {
			ids = append(ids, w.WRID)
		}
	}
}
