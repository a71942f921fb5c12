package mr

import (
	"errors"
	"sync"
	"syscall"
	"testing"

	"github.com/softhca/softhca/verbs"
	"github.com/stretchr/testify/require"
)

func TestRegisterAccessRules(t *testing.T) {
	const lw, rw, rr, ra = verbs.AccessLocalWrite, verbs.AccessRemoteWrite, verbs.AccessRemoteRead, verbs.AccessRemoteAtomic
	cases := []struct {
		name   string
		size   int
		access verbs.AccessFlags
		errno  syscall.Errno // 0: success
	}{
		{"local read only", 64, 0, 0},
		{"local write", 64, lw, 0},
		{"remote read without local write", 64, rr, 0},
		{"remote write without local write", 64, rw, syscall.EINVAL},
		{"remote atomic without local write", 64, ra, syscall.EINVAL},
		{"remote write with local write", 64, lw | rw, 0},
		{"everything", 64, lw | rw | rr | ra, 0},
		{"unknown bit", 64, lw | 1<<15, syscall.EINVAL},
		{"on demand", 64, lw | verbs.AccessOnDemand, syscall.EOPNOTSUPP},
		{"empty buffer", 0, lw, syscall.EINVAL},
		{"above max_mr_size", 4097, lw, syscall.EINVAL},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tb := NewTable(8, 4096)
			m, err := tb.Register(1, make([]byte, c.size), c.access)
			if c.errno != 0 {
				require.ErrorIs(t, err, c.errno)
				require.Nil(t, m)
				require.Equal(t, 0, tb.Count(), "a failed registration changes nothing")
				return
			}
			require.NoError(t, err)
			require.Equal(t, m.LKey(), m.RKey())
			require.NotZero(t, m.LKey())
			require.Equal(t, c.access, m.Access())
			require.Equal(t, 1, tb.Count())
		})
	}
}

func TestRegisterLimitAndDeregister(t *testing.T) {
	tb := NewTable(2, 1<<20)
	a, err := tb.Register(1, make([]byte, 8), 0)
	require.NoError(t, err)
	b, err := tb.Register(1, make([]byte, 8), 0)
	require.NoError(t, err)
	require.NotEqual(t, a.LKey(), b.LKey())
	_, err = tb.Register(1, make([]byte, 8), 0)
	require.ErrorIs(t, err, syscall.ENOMEM)

	require.NoError(t, tb.Deregister(a))
	require.ErrorIs(t, tb.Deregister(a), syscall.EINVAL, "double deregistration")
	_, st := tb.Lookup(a.LKey(), 1, a.Addr(), 1, 0)
	require.Equal(t, BadKey, st, "a deregistered key no longer resolves")
	_, err = tb.Register(1, make([]byte, 8), 0)
	require.NoError(t, err, "deregistration frees a slot")
}

func TestLookupChecks(t *testing.T) {
	tb := NewTable(8, 1<<20)
	buf := make([]byte, 100)
	for i := range buf {
		buf[i] = byte(i)
	}
	m, err := tb.Register(7, buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	require.NoError(t, err)
	a := m.Addr()
	cases := []struct {
		name string
		key  uint32
		pd   uint32
		va   uint64
		n    uint32
		need verbs.AccessFlags
		want Status
	}{
		{"whole region", m.LKey(), 7, a, 100, 0, OK},
		{"inside", m.LKey(), 7, a + 10, 20, verbs.AccessRemoteRead, OK},
		{"zero length at end", m.LKey(), 7, a + 100, 0, 0, OK},
		{"wrong key", m.LKey() ^ 1, 7, a, 1, 0, BadKey},
		{"wrong pd", m.LKey(), 8, a, 1, 0, BadPD},
		{"before start", m.LKey(), 7, a - 1, 2, 0, BadBounds},
		{"past end", m.LKey(), 7, a + 90, 11, 0, BadBounds},
		{"length overflow", m.LKey(), 7, a + 1, 0xffffffff, 0, BadBounds},
		{"address overflow", m.LKey(), 7, ^uint64(0), 2, 0, BadBounds},
		{"missing remote write", m.LKey(), 7, a, 1, verbs.AccessRemoteWrite, BadAccess},
		{"missing atomic", m.LKey(), 7, a, 8, verbs.AccessRemoteAtomic, BadAccess},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, st := tb.Lookup(c.key, c.pd, c.va, c.n, c.need)
			require.Equal(t, c.want, st, st.String())
			if c.want == OK {
				require.Len(t, b, int(c.n))
				if c.n > 0 {
					require.Equal(t, byte(c.va-a), b[0], "slice starts at the address")
				}
			} else {
				require.Nil(t, b)
			}
		})
	}
	sge := m.SGE(5, 10)
	require.Equal(t, verbs.SGE{Addr: a + 5, Length: 10, LKey: m.LKey()}, sge)
}

// TestLookupConcurrentWithRegistration looks keys up while other
// goroutines register and deregister; run with -race.
func TestLookupConcurrentWithRegistration(t *testing.T) {
	tb := NewTable(1000, 1<<20)
	stable, err := tb.Register(1, make([]byte, 64), 0)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				m, err := tb.Register(1, make([]byte, 16), 0)
				if err != nil {
					t.Error(err)
					return
				}
				if err := tb.Deregister(m); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for i := 0; i < 2000; i++ {
		_, st := tb.Lookup(stable.LKey(), 1, stable.Addr(), 64, 0)
		require.Equal(t, OK, st)
	}
	wg.Wait()
	require.Equal(t, 1, tb.Count())
	var e *verbs.Error
	_, err = tb.Register(1, nil, 0)
	require.True(t, errors.As(err, &e))
	require.Equal(t, "reg_mr", e.Op)
}

// TestRegions lists the live regions, by PD and address, and no
// deregistered one.
func TestRegions(t *testing.T) {
	tb := NewTable(16, 1<<20)
	bufs := make([][]byte, 4)
	var regs []*MR
	for i := range bufs {
		bufs[i] = make([]byte, 64)
		m, err := tb.Register(uint32(2-i%2), bufs[i], verbs.AccessLocalWrite)
		require.NoError(t, err)
		regs = append(regs, m)
	}
	require.NoError(t, tb.Deregister(regs[1]))
	got := tb.Regions()
	require.Len(t, got, 3)
	for i, m := range got {
		require.NotSame(t, regs[1], m)
		if i > 0 {
			prev := got[i-1]
			require.True(t, prev.PD() < m.PD() || prev.PD() == m.PD() && prev.Addr() < m.Addr(), "order at %d", i)
		}
	}
	require.Empty(t, NewTable(1, 1).Regions())
}
