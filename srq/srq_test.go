package srq

import (
	"errors"
	"sync"
	"syscall"
	"testing"

	"github.com/softhca/softhca/verbs"
	"github.com/stretchr/testify/require"
)

func newSRQ(t *testing.T, maxWR, maxSGE uint32, onLimit func(*SRQ)) *SRQ {
	t.Helper()
	s, err := New(Config{
		Attr:     verbs.SRQAttr{MaxWR: maxWR, MaxSGE: maxSGE, SRQLimit: 3},
		DevMaxWR: 1024, DevMaxSGE: 4, CanResize: true, PD: 1, OnLimit: onLimit,
	})
	require.NoError(t, err)
	return s
}

func TestCreateLimits(t *testing.T) {
	for _, c := range []struct {
		name          string
		maxWR, maxSGE uint32
		ok            bool
	}{
		{"smallest", 1, 1, true},
		{"device max", 1024, 4, true},
		{"zero wr", 0, 1, false},
		{"too many wr", 1025, 1, false},
		{"zero sge", 1, 0, false},
		{"too many sge", 1, 5, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := New(Config{Attr: verbs.SRQAttr{MaxWR: c.maxWR, MaxSGE: c.maxSGE}, DevMaxWR: 1024, DevMaxSGE: 4})
			if !c.ok {
				require.ErrorIs(t, err, syscall.EINVAL)
				return
			}
			require.NoError(t, err)
			a := s.Query()
			require.Equal(t, verbs.SRQAttr{MaxWR: c.maxWR, MaxSGE: c.maxSGE}, a, "srq_limit is ignored at creation")
		})
	}
}

func TestPostStopsAtFirstBad(t *testing.T) {
	s := newSRQ(t, 2, 2, nil)
	third := &verbs.RecvWR{WRID: 3}
	second := &verbs.RecvWR{WRID: 2, Next: third, SGList: make([]verbs.SGE, 3)}
	first := &verbs.RecvWR{WRID: 1, Next: second}
	bad, err := s.PostRecv(first)
	require.ErrorIs(t, err, syscall.EINVAL)
	require.Same(t, second, bad)
	require.Equal(t, 1, s.Len(), "the request before the bad one is posted")

	bad, err = s.PostRecv(&verbs.RecvWR{WRID: 4, Next: &verbs.RecvWR{WRID: 5}})
	require.ErrorIs(t, err, syscall.ENOMEM)
	require.Equal(t, uint64(5), bad.WRID)
	require.Equal(t, 2, s.Len())

	var w RecvWQE
	require.True(t, s.Take(&w))
	require.Equal(t, uint64(1), w.WRID)
	require.True(t, s.Take(&w))
	require.Equal(t, uint64(4), w.WRID)
	require.False(t, s.Take(&w))
}

func TestScatterListCopied(t *testing.T) {
	s := newSRQ(t, 4, 3, nil)
	sgl := []verbs.SGE{{Addr: 1, Length: 2, LKey: 3}, {Addr: 4, Length: 5, LKey: 6}}
	wr := &verbs.RecvWR{WRID: 9, SGList: sgl}
	_, err := s.PostRecv(wr)
	require.NoError(t, err)
	sgl[0].Addr = 100 // the caller may reuse its request after posting
	var w RecvWQE
	require.True(t, s.Take(&w))
	require.Equal(t, []verbs.SGE{{Addr: 1, Length: 2, LKey: 3}, {Addr: 4, Length: 5, LKey: 6}}, w.SGL)
}

func TestCheckerRejects(t *testing.T) {
	s, err := New(Config{Attr: verbs.SRQAttr{MaxWR: 4, MaxSGE: 2}, DevMaxWR: 8, DevMaxSGE: 2,
		Check: func(sge verbs.SGE) error {
			if sge.LKey == 0 {
				return errors.New("bad lkey")
			}
			return nil
		}})
	require.NoError(t, err)
	bad, err := s.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{{LKey: 1}, {LKey: 0}}})
	require.ErrorIs(t, err, syscall.EINVAL)
	require.Contains(t, err.Error(), "sg_list[1]")
	require.Equal(t, uint64(1), bad.WRID)
	require.Equal(t, 0, s.Len())
}

// TestLimitEvent: arming fires once when the count drops below the limit,
// then the SRQ is disarmed (query shows 0) until re-armed.
func TestLimitEvent(t *testing.T) {
	fired := 0
	s := newSRQ(t, 8, 1, func(*SRQ) { fired++ })
	for i := range 5 {
		_, err := s.PostRecv(&verbs.RecvWR{WRID: uint64(i)})
		require.NoError(t, err)
	}
	var w RecvWQE
	require.True(t, s.Take(&w)) // 4 left, not armed yet
	require.Equal(t, 0, fired)
	require.NoError(t, s.Modify(&verbs.SRQAttr{SRQLimit: 3}, verbs.SRQLimit))
	require.Equal(t, uint32(3), s.Query().SRQLimit)
	require.True(t, s.Take(&w)) // 3 left: not below 3
	require.Equal(t, 0, fired)
	require.True(t, s.Take(&w)) // 2 left: below 3
	require.Equal(t, 1, fired)
	require.Equal(t, uint32(0), s.Query().SRQLimit, "the event disarms")
	require.True(t, s.Take(&w))
	require.Equal(t, 1, fired, "one event per arming")
}

func TestModifyAllOrNothing(t *testing.T) {
	s := newSRQ(t, 8, 1, nil)
	for i := range 6 {
		_, err := s.PostRecv(&verbs.RecvWR{WRID: uint64(i)})
		require.NoError(t, err)
	}
	err := s.Modify(&verbs.SRQAttr{MaxWR: 16, SRQLimit: 17}, verbs.SRQMaxWR|verbs.SRQLimit)
	require.ErrorIs(t, err, syscall.EINVAL)
	require.Equal(t, verbs.SRQAttr{MaxWR: 8, MaxSGE: 1}, s.Query(), "nothing modified")
	require.ErrorIs(t, s.Modify(&verbs.SRQAttr{MaxWR: 5}, verbs.SRQMaxWR), syscall.EINVAL, "below queued count")
	require.ErrorIs(t, s.Modify(&verbs.SRQAttr{MaxWR: 2000}, verbs.SRQMaxWR), syscall.EINVAL)
	require.ErrorIs(t, s.Modify(&verbs.SRQAttr{}, 1<<5), syscall.EINVAL)
	require.NoError(t, s.Modify(&verbs.SRQAttr{MaxWR: 6}, verbs.SRQMaxWR))
	require.Equal(t, uint32(6), s.Query().MaxWR)
	var w RecvWQE
	for i := range 6 {
		require.True(t, s.Take(&w))
		require.Equal(t, uint64(i), w.WRID, "resize keeps order")
	}
}

func TestDestroyBusy(t *testing.T) {
	s := newSRQ(t, 8, 1, nil)
	s.AddUser()
	require.ErrorIs(t, s.Destroy(), syscall.EBUSY)
	s.RemoveUser()
	require.NoError(t, s.Destroy())
	_, err := s.PostRecv(&verbs.RecvWR{})
	require.ErrorIs(t, err, syscall.EINVAL)
}

func TestConcurrentPostTake(t *testing.T) {
	s := newSRQ(t, 64, 1, nil)
	const n = 4000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < n; {
			if _, err := s.PostRecv(&verbs.RecvWR{WRID: uint64(i)}); err == nil {
				i++
			}
		}
	}()
	var w RecvWQE
	for next := 0; next < n; {
		if s.Take(&w) {
			require.Equal(t, uint64(next), w.WRID)
			next++
		}
	}
	wg.Wait()
}
