package pingpong

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/verbs"
)

// side is one finished run.
type side struct {
	out string
	err error
	// addr is the address the device was asked to open on.
	addr netip.AddrPort
}

// udpLink opens a UDP link on 127.0.0.1 and a free port, with the
// segmentation offloads, as the command opens its link.
func udpLink(t *testing.T) (*udp.Link, uint16) {
	t.Helper()
	l, err := udp.Open(udp.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0"), GSO: true, GRO: true})
	require.NoError(t, err)
	la, err := l.LocalAddr()
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l, la.SrcPort
}

// runPair runs a server and a client in this process, on UDP links on
// 127.0.0.1 with free ports, with cfg (mode, sizes...) for both; adjust
// changes each side's copy (server is true for the server's).
func runPair(t *testing.T, cfg Config, adjust func(c *Config, server bool)) (server, client side) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ls, ps := udpLink(t)
	lc, pc := udpLink(t)

	sc, cc := cfg, cfg
	sc.Listener = ln
	sc.Addr = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), ps)
	sc.PeerPort = pc
	cc.ServerName = "127.0.0.1"
	cc.Port = ln.Addr().(*net.TCPAddr).Port
	cc.Addr = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), pc)
	cc.PeerPort = ps
	hook := func(l link.Link, s *side) func(netip.AddrPort) (link.Link, error) {
		return func(a netip.AddrPort) (link.Link, error) { s.addr = a; return l, nil }
	}
	sc.OpenLink = hook(ls, &server)
	cc.OpenLink = hook(lc, &client)
	if adjust != nil {
		adjust(&sc, true)
		adjust(&cc, false)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	run := func(c Config, s *side) {
		defer wg.Done()
		var out bytes.Buffer
		s.err = Run(ctx, c, &out)
		s.out = out.String()
		if s.err != nil && !errors.Is(s.err, ErrInvalidData) {
			cancel() // the peer would wait forever
		}
	}
	wg.Add(2)
	go run(sc, &server)
	go run(cc, &client)
	wg.Wait()
	return server, client
}

var (
	resultRE = regexp.MustCompile(`(?m)^(\d+) bytes in (\d+\.\d\d) seconds = (\d+\.\d\d|inf|nan) Mbit/sec\n(\d+) iters in (\d+\.\d\d) seconds = (\d+\.\d\d|inf) usec/iter\n`)
	localRE  = regexp.MustCompile(`(?m)^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}[,:] GID (\S+)$`)
	remoteRE = regexp.MustCompile(`(?m)^  remote address: LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID (\S+)$`)
)

// requireOK checks a successful run's output: nq local and remote
// address lines with the GIDs, and the result lines for size and iters.
func requireOK(t *testing.T, s side, nq int, gid string, size, iters uint32) {
	t.Helper()
	require.NoError(t, s.err, "output:\n%s", s.out)
	locals := localRE.FindAllStringSubmatch(s.out, -1)
	remotes := remoteRE.FindAllStringSubmatch(s.out, -1)
	require.Len(t, locals, nq, s.out)
	require.Len(t, remotes, nq, s.out)
	for i := range nq {
		require.Equal(t, gid, locals[i][1])
		require.Equal(t, gid, remotes[i][1])
	}
	m := resultRE.FindStringSubmatch(s.out)
	require.NotNil(t, m, "result lines in:\n%s", s.out)
	require.Equal(t, fmt.Sprint(uint64(size)*uint64(iters)*2), m[1])
	require.Equal(t, fmt.Sprint(iters), m[4])
	require.NotContains(t, s.out, "invalid data")
}

func TestPingpongModes(t *testing.T) {
	type tc struct {
		mode   Mode
		size   uint32
		mtu    verbs.MTU
		events bool
	}
	var cases []tc
	for _, mode := range []Mode{RC, UC, UD, SRQ} {
		for _, events := range []bool{false, true} {
			for _, mtu := range []verbs.MTU{verbs.MTU1024, verbs.MTU4096} {
				sizes := []uint32{64, 4096, 65536}
				if mode == UD {
					sizes = []uint32{64, uint32(mtu.Bytes())} // UD: at most the port MTU
				}
				for _, size := range sizes {
					cases = append(cases, tc{mode, size, mtu, events})
				}
			}
		}
	}
	for _, c := range cases {
		name := fmt.Sprintf("%s/size=%d/mtu=%d/events=%v", c.mode, c.size, c.mtu.Bytes(), c.events)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := NewConfig(c.mode)
			cfg.Size, cfg.Events, cfg.GIDIndex, cfg.Validate = c.size, c.events, 1, true
			cfg.Iters = 20
			if c.mode == SRQ {
				cfg.NumQP = 4
				cfg.RxDepth = 16
			}
			if c.mode == UD {
				cfg.PortMTU = c.mtu // UD's limit is the port's MTU
			} else {
				cfg.MTU = c.mtu
			}
			server, client := runPair(t, cfg, nil)
			nq := 1
			if c.mode == SRQ {
				nq = 4
			}
			requireOK(t, server, nq, "::ffff:127.0.0.1", c.size, 20)
			requireOK(t, client, nq, "::ffff:127.0.0.1", c.size, 20)
			if c.mode == UD {
				require.Contains(t, server.out, "  local address:  LID 0x0000, QPN")
				require.Regexp(t, `PSN 0x[0-9a-f]{6}: GID`, server.out, "ud's local line has rdma-core's colon")
			}
		})
	}
}

// The device binds the local address of the TCP connection, port 4791:
// the server's is the address the client connected to (127.0.0.2), the
// client's the one its kernel chose as source (127.0.0.1).
func TestPingpongAddressFromTCP(t *testing.T) {
	cfg := NewConfig(RC)
	cfg.Iters, cfg.GIDIndex = 5, 1
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("127.0.0.2 is not usable here: %v", err)
	}
	server, client := runPair(t, cfg, func(c *Config, isServer bool) {
		c.Addr = netip.AddrPort{}
		if isServer {
			c.Listener.Close()
			c.Listener = ln
		} else {
			c.ServerName = "127.0.0.2"
			c.Port = ln.Addr().(*net.TCPAddr).Port
		}
	})
	// The links are on 127.0.0.1 whatever the address asked for: the
	// test checks the choice, not the bind.
	require.Equal(t, "127.0.0.2:4791", server.addr.String())
	require.Equal(t, "127.0.0.1:4791", client.addr.String())
	require.NoError(t, server.err, server.out)
	require.NoError(t, client.err, client.out)
	requireOK(t, server, 1, "::ffff:127.0.0.1", DefaultSize, 5)
	requireOK(t, client, 1, "::ffff:127.0.0.1", DefaultSize, 5)
}

// StatsFile gets the device's counters when the run ends.
func TestPingpongStatsFile(t *testing.T) {
	cfg := NewConfig(RC)
	cfg.Iters, cfg.GIDIndex = 10, 1
	file := filepath.Join(t.TempDir(), "stats.json")
	server, client := runPair(t, cfg, func(c *Config, isServer bool) {
		if isServer {
			c.StatsFile = file
		}
	})
	requireOK(t, server, 1, "::ffff:127.0.0.1", DefaultSize, 10)
	requireOK(t, client, 1, "::ffff:127.0.0.1", DefaultSize, 10)
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var m map[string]uint64
	require.NoError(t, json.Unmarshal(b, &m))
	// 4096-byte messages at MTU 1024: 4 packets each; 10 each way, and an
	// ACK for each message; more if a timer fired on a busy machine.
	if m["retransmits"] == 0 && m["duplicates_answered"] == 0 {
		require.Equal(t, uint64(10*4+10), m["rx_packets"], "%s", b)
		require.Equal(t, uint64(10*4+10), m["tx_packets"], "%s", b)
		require.Equal(t, uint64(10), m["acks_sent"], "%s", b)
	} else {
		require.GreaterOrEqual(t, m["rx_packets"], uint64(10*4+10), "%s", b)
		require.GreaterOrEqual(t, m["tx_packets"], uint64(10*4+10), "%s", b)
	}
}

// -c finds data that is not what the peer sends: here the client sends
// its buffer without -c's pattern (the first byte of each page 0), so
// every page the server receives is wrong. rdma-core prints the same
// lines (and exits 0); softhca fails. (srq_pingpong's buffer starts all
// zero, so there the pattern changes nothing.)
func TestPingpongValidateDetects(t *testing.T) {
	page := os.Getpagesize()
	for _, mode := range []Mode{RC, UC, UD} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg := NewConfig(mode)
			cfg.Iters, cfg.GIDIndex, cfg.Size = 5, 1, uint32(2*page)
			if mode == UD {
				cfg.Size, cfg.PortMTU = 4096, verbs.MTU4096
			}
			server, client := runPair(t, cfg, func(c *Config, isServer bool) { c.Validate = isServer })
			require.NoError(t, client.err, client.out)
			require.ErrorIs(t, server.err, ErrInvalidData)
			want := "invalid data in page 0\n"
			if int(cfg.Size) > page {
				want += "invalid data in page 1\n"
			}
			require.True(t, strings.HasSuffix(server.out, " usec/iter\n"+want), server.out)
		})
	}
}

// The link is a UDP socket with GSO and GRO unless NoGSO (--no-gso), which
// opens it with neither: one datagram per packet, as a loopback capture
// should see them.
func TestLinkConfigNoGSO(t *testing.T) {
	addr := netip.MustParseAddrPort("127.0.0.1:0")
	for _, noGSO := range []bool{false, true} {
		cfg := NewConfig(RC)
		cfg.NoGSO = noGSO
		uc := cfg.linkConfig(addr)
		require.Equal(t, !noGSO, uc.GSO)
		require.Equal(t, !noGSO, uc.GRO)
		require.True(t, uc.ECN)
		l, err := udp.Open(uc)
		require.NoError(t, err)
		info := l.Info()
		l.Close()
		if noGSO {
			require.False(t, info.GSO, "--no-gso: no UDP_SEGMENT")
			require.False(t, info.GRO, "--no-gso: no UDP_GRO")
		} else if !info.GSO {
			t.Log("the kernel offers no UDP GSO here: only the configuration is checked")
		}
	}
}
