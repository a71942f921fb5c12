package perftest

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseTest(t *testing.T) {
	for name, want := range map[string]Test{
		"send":         {Send, false},
		"write_bw":     {Write, false},
		"ib_read_bw":   {Read, false},
		"atomic":       {Atomic, false},
		"write_lat":    {Write, true},
		"ib_send_lat":  {Send, true},
		"ib_atomic_bw": {Atomic, false},
	} {
		got, err := ParseTest(name)
		require.NoError(t, err, name)
		require.Equal(t, want, got, name)
	}
	for _, bad := range []string{"", "ib_", "write_", "writes", "ud_send", "write_latency"} {
		_, err := ParseTest(bad)
		require.Error(t, err, bad)
	}
	require.Equal(t, "ib_atomic_lat", Test{Atomic, true}.String())
}

func TestParseArgsDefaults(t *testing.T) {
	cases := []struct {
		test                       Test
		size, iters, tx, rx, cqMod int
	}{
		{Test{Write, false}, 65536, 5000, 128, 1, 1}, // size > 8192 signals every WR
		{Test{Send, false}, 65536, 1000, 128, 512, 1},
		{Test{Read, false}, 65536, 1000, 128, 1, 1},
		{Test{Atomic, false}, 8, 1000, 128, 1, 100},
		{Test{Write, true}, 2, 1000, 1, 1, 1},
		{Test{Send, true}, 2, 1000, 1, 512, 1},
	}
	for _, c := range cases {
		o, err := ParseArgs(c.test, nil)
		require.NoError(t, err, c.test)
		require.Equal(t, []int{c.size, c.iters, c.tx, c.rx, c.cqMod}, []int{o.Size, o.Iters, o.TxDepth, o.RxDepth, o.CQMod}, c.test)
		require.Equal(t, DefaultPort, o.Port)
		require.Equal(t, -1, o.GIDIndex)
		require.Empty(t, o.Server)
	}
}

func TestParseArgs(t *testing.T) {
	o, err := ParseArgs(Test{Write, false}, []string{"-d", "rxe0", "-x1", "-F", "--report_gbits", "-s", "1024",
		"10.0.0.1", "-n", "10", "--port=4000", "-m", "2048", "-aN", "--addr", "10.0.0.2:5000", "--peer-port", "6000", "--timeout", "3s"})
	require.NoError(t, err)
	require.Equal(t, "10.0.0.1", o.Server)
	require.Equal(t, "rxe0", o.Device)
	require.Equal(t, 1, o.GIDIndex)
	require.True(t, o.Gbits)
	require.True(t, o.All)
	require.True(t, o.NoPeak)
	require.Equal(t, 10, o.Iters)
	require.Equal(t, 10, o.TxDepth) // at most the iterations
	require.Equal(t, 10, o.CQMod)
	require.Equal(t, 4000, o.Port)
	require.Equal(t, 2048, o.MTU)
	require.Equal(t, netip.MustParseAddrPort("10.0.0.2:5000"), o.Addr)
	require.Equal(t, uint16(6000), o.PeerPort)
	require.Equal(t, 3*time.Second, o.Timeout)
	require.Len(t, o.sizes(), 23)
	require.Equal(t, MaxSize, o.bufSize())

	o, err = ParseArgs(Test{Atomic, false}, []string{"-A", "CMP_AND_SWAP", "-o", "16", "--addr", "::ffff:127.0.0.5", "--", "host"})
	require.NoError(t, err)
	require.Equal(t, CmpAndSwap, o.AtomicType)
	require.Equal(t, 16, o.OutReads)
	require.Equal(t, netip.MustParseAddr("127.0.0.5"), o.Addr.Addr())
	require.Equal(t, "host", o.Server)

	// --tap NAME with --addr, the port 4791 or left out; --tap-mac.
	o, err = ParseArgs(Test{Read, true}, []string{"--tap", "tap0", "--addr", "10.9.0.2", "10.9.0.1"})
	require.NoError(t, err)
	require.Equal(t, "tap0", o.Tap)
	require.Equal(t, [6]byte{}, o.TapMAC)
	require.Equal(t, netip.MustParseAddrPort("10.9.0.2:0"), o.Addr)
	o, err = ParseArgs(Test{Write, false}, []string{"--addr=[fd00::2]:4791", "--tap-mac=02:AA:bb:cc:dd:ee", "--tap=tap1"})
	require.NoError(t, err)
	require.Equal(t, "tap1", o.Tap)
	require.Equal(t, [6]byte{2, 0xaa, 0xbb, 0xcc, 0xdd, 0xee}, o.TapMAC)
	require.Equal(t, netip.MustParseAddrPort("[fd00::2]:4791"), o.Addr)

	o, err = ParseArgs(Test{Send, false}, []string{"-s", "100000"})
	require.NoError(t, err)
	require.True(t, o.NoPeak, "the send_bw server reports no peak")
	require.Equal(t, 1, o.CQMod)
	o, err = ParseArgs(Test{Send, false}, []string{"-s", "100000", "-Q", "50", "x"})
	require.NoError(t, err)
	require.False(t, o.NoPeak)
	require.Equal(t, 50, o.CQMod)
}

func TestParseArgsErrors(t *testing.T) {
	for _, c := range []struct {
		test Test
		args []string
		msg  string
	}{
		{Test{Write, false}, []string{"-Z"}, "unknown option -Z"},
		{Test{Write, false}, []string{"--frobnicate"}, "unknown option --frobnicate"},
		{Test{Write, false}, []string{"-s"}, "needs a value"},
		{Test{Write, false}, []string{"--size"}, "needs a value"},
		{Test{Write, false}, []string{"--all=1"}, "takes no value"},
		{Test{Write, false}, []string{"-s", "0"}, "-s \"0\""},
		{Test{Write, false}, []string{"-n", "4"}, "5..100000000"},
		{Test{Write, false}, []string{"-m", "1500"}, "256, 512"},
		{Test{Write, false}, []string{"-c", "UC"}, "RC only"},
		{Test{Write, false}, []string{"-q", "2"}, "one QP"},
		{Test{Write, false}, []string{"-i", "2"}, "1..1"},
		{Test{Write, false}, []string{"-A", "FETCH_AND_ADD"}, "atomic tests only"},
		{Test{Write, false}, []string{"-o", "4"}, "read and atomic"},
		{Test{Atomic, false}, []string{"-A", "SWAP"}, "CMP_AND_SWAP or FETCH_AND_ADD"},
		{Test{Atomic, false}, []string{"-s", "16"}, "atomic tests"},
		{Test{Atomic, false}, []string{"-a"}, "atomic tests"},
		{Test{Write, false}, []string{"a", "b"}, "more than one server"},
		{Test{Write, false}, []string{"-s", "8", ""}, `the server name is ""`},
		{Test{Write, false}, []string{"--addr", "nowhere"}, "IP or IP:PORT"},
		{Test{Write, false}, []string{"--timeout", "soon"}, "duration"},
		{Test{Write, false}, []string{"--tap", "tap0"}, "--tap tap0 needs --addr: the device's own IP address"},
		{Test{Write, false}, []string{"--tap", "tap0", "10.0.0.1"}, "--tap tap0 needs --addr"},
		{Test{Write, false}, []string{"--tap", "tap0", "--addr", "10.9.0.2:4800"}, "--tap tap0: --addr 10.9.0.2:4800: a TAP host receives RoCEv2 on UDP port 4791 only"},
		{Test{Write, false}, []string{"--tap="}, "--tap: no interface name"},
		{Test{Write, false}, []string{"--tap", "a-name-of-16-bytes", "--addr", "10.9.0.2"}, "at most 15 bytes"},
		{Test{Write, false}, []string{"--tap"}, "option --tap needs a value"},
		{Test{Write, false}, []string{"--tap-mac", "02:00:00:00:00:01", "--addr", "10.9.0.2"}, "--tap-mac is the MAC of a --tap device: give --tap too"},
		{Test{Write, false}, []string{"--tap", "t", "--addr", "10.9.0.2", "--tap-mac", "02:00"}, `--tap-mac "02:00": want an Ethernet MAC address`},
		{Test{Write, false}, []string{"--tap", "t", "--addr", "10.9.0.2", "--tap-mac", "ff:ff:ff:ff:ff:ff"}, "--tap-mac ff:ff:ff:ff:ff:ff: not a unicast MAC address"},
	} {
		_, err := ParseArgs(c.test, c.args)
		require.ErrorContains(t, err, c.msg, "%v %v", c.test, c.args)
	}

	_, err := ParseArgs(Test{Write, false}, []string{"-b", "-s", "10", "-R", "--run_infinitely", "-D", "5", "--output=bandwidth", "-ae"})
	var ue *UnsupportedError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, []string{"-b (--bidirectional)", "-R (--rdma_cm)", "--run_infinitely", "-D (--duration)", "--output", "-e (--events)"}, ue.Options)
	require.ErrorContains(t, err, "not supported by softhca perf: -b (--bidirectional), -R (--rdma_cm)")

	_, err = ParseArgs(Test{Write, false}, []string{"-s", "8", "-h"})
	require.ErrorIs(t, err, ErrHelp)
	_, err = ParseArgs(Test{Write, false}, []string{"--version"})
	require.ErrorIs(t, err, ErrVersion)
}

// --no-gso opens the device's UDP link without GSO and GRO.
func TestParseArgsNoGSO(t *testing.T) {
	o, err := ParseArgs(Test{Write, false}, nil)
	require.NoError(t, err)
	require.False(t, o.NoGSO)
	uc := o.linkConfig(netip.MustParseAddrPort("127.0.0.1:4791"))
	require.True(t, uc.GSO)
	require.True(t, uc.GRO)

	o, err = ParseArgs(Test{Write, false}, []string{"--no-gso", "10.0.0.1"})
	require.NoError(t, err)
	require.True(t, o.NoGSO)
	uc = o.linkConfig(netip.MustParseAddrPort("127.0.0.1:4791"))
	require.Equal(t, netip.MustParseAddrPort("127.0.0.1:4791"), uc.Addr)
	require.False(t, uc.GSO)
	require.False(t, uc.GRO)
	require.True(t, uc.ECN)

	_, err = ParseArgs(Test{Write, false}, []string{"--no-gso=1"})
	require.ErrorContains(t, err, "option --no-gso takes no value")
}
