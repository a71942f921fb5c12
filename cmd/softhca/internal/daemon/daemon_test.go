package daemon_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softhca/softhca/cmd/softhca/internal/control"
	"github.com/softhca/softhca/cmd/softhca/internal/daemon"
	"github.com/softhca/softhca/cmd/softhca/internal/devinfo"
	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

var lo = netip.MustParseAddrPort("127.0.0.1:0")

// start runs a daemon on a free loopback port with its control socket in
// a temporary directory.
func start(t *testing.T, edit func(*daemon.Config)) *daemon.Daemon {
	t.Helper()
	cfg := daemon.Config{Listen: lo, Control: filepath.Join(t.TempDir(), "d.sock"), TraceRing: 64,
		Summarize: func(p *wire.Packet) string { return p.BTH.OpCode().String() }}
	if edit != nil {
		edit(&cfg)
	}
	d, err := daemon.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Stop()) })
	return d
}

// syncBuffer is a buffer a daemon's goroutines may write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func dial(t *testing.T, d *daemon.Daemon) *control.Client {
	t.Helper()
	c, err := control.Dial(d.ControlPath())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// peer is a device in the test's process, and a QP connected to one of
// the daemon's.
type peer struct {
	dev *hca.Device
	cq  *hca.CQ
	mr  *hca.MR
	buf []byte
	qp  *hca.QP
}

func newPeer(t *testing.T, dev *hca.Device) *peer {
	t.Helper()
	p := &peer{dev: dev, buf: make([]byte, 4096)}
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	p.cq, err = dev.CreateCQ(64, nil, nil, 0)
	require.NoError(t, err)
	p.mr, err = pd.RegMR(p.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	require.NoError(t, err)
	p.qp, err = pd.CreateQP(&hca.QPInitAttr{SendCQ: p.cq, RecvCQ: p.cq, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	return p
}

// connectRC connects two peers' QPs.
func connectRC(t *testing.T, a, b *peer) {
	t.Helper()
	ag, err := a.dev.QueryGID(1, 1)
	require.NoError(t, err)
	bg, err := b.dev.QueryGID(1, 1)
	require.NoError(t, err)
	o := &hca.ConnectOptions{PathMTU: verbs.MTU1024}
	require.NoError(t, a.qp.Connect(hca.Remote{QPN: b.qp.Num(), GID: bg}, o))
	require.NoError(t, b.qp.Connect(hca.Remote{QPN: a.qp.Num(), GID: ag}, o))
}

// peerLink is a UDP link for a peer device on 127.0.0.2 and its port, to
// give the daemon as its PeerPort.
func peerLink(t *testing.T) (*udp.Link, uint16) {
	t.Helper()
	l, err := udp.Open(udp.Config{Addr: netip.MustParseAddrPort("127.0.0.2:0")})
	require.NoError(t, err)
	a, err := l.LocalAddr()
	require.NoError(t, err)
	return l, a.SrcPort
}

// openPeerDevice opens a device on l whose peers listen on port.
func openPeerDevice(t *testing.T, l *udp.Link, port uint16) *hca.Device {
	t.Helper()
	dev, err := hca.Open(hca.Config{Link: l, PeerPort: port})
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	return dev
}

func pollOne(t *testing.T, cq *hca.CQ) verbs.WC {
	t.Helper()
	wcs := make([]verbs.WC, 1)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if cq.Poll(wcs) == 1 {
			return wcs[0]
		}
		time.Sleep(time.Millisecond) // polling a CQ: no completion event to wait on
	}
	t.Fatal("no completion")
	return verbs.WC{}
}

// TestStatusResStat: the control API describes the device, its objects
// and its counters while traffic flows, and the trace stream shows the
// packets.
func TestStatusResStat(t *testing.T) {
	pl, pport := peerLink(t)
	d := start(t, func(c *daemon.Config) {
		c.PeerPort = pport
		c.Regions = []daemon.Region{{Name: "buf", Size: 1 << 20, Access: verbs.AccessLocalWrite | verbs.AccessRemoteRead}}
	})
	c := dial(t, d)
	ctx := context.Background()

	var st control.Status
	require.NoError(t, c.Call(ctx, control.Request{Op: control.OpStatus}, &st))
	require.Equal(t, "softhca0", st.Device)
	require.Equal(t, d.Listen().String(), st.Listen)
	require.Equal(t, os.Getpid(), st.PID)
	require.Len(t, st.Regions, 1)
	require.Equal(t, "buf", st.Regions[0].Name)
	require.Equal(t, uint64(1<<20), st.Regions[0].Length)
	require.Equal(t, []string{"local_write", "remote_read"}, st.Regions[0].Access)
	require.Len(t, st.GIDs, 2)                       // the link-local GID and the address's
	require.Equal(t, "::ffff:127.0.0.1", st.GIDs[1]) // as ibv_devinfo -v prints it

	// A QP on the daemon's device, connected to a peer, and a SEND.
	srv := newPeer(t, d.Device())
	cli := newPeer(t, openPeerDevice(t, pl, d.Listen().Port()))
	connectRC(t, srv, cli)
	_, err := srv.qp.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{srv.mr.SGE(0, 64)}})
	require.NoError(t, err)
	_, err = srv.qp.PostRecv(&verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{srv.mr.SGE(64, 64)}})
	require.NoError(t, err)

	_, err = cli.qp.PostSend(&verbs.SendWR{WRID: 7, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{cli.mr.SGE(0, 17)}})
	require.NoError(t, err)
	require.Equal(t, verbs.WCSuccess, pollOne(t, cli.cq).Status)
	wc := pollOne(t, srv.cq)
	require.Equal(t, uint32(17), wc.ByteLen)

	var qps []control.QP
	require.NoError(t, c.Call(ctx, control.Request{Op: control.OpRes, Object: "qp"}, &qps))
	require.Len(t, qps, 1)
	q := qps[0]
	require.Equal(t, srv.qp.Num(), q.LQPN)
	require.Equal(t, cli.qp.Num(), q.RQPN)
	require.Equal(t, "RC", q.Type)
	require.Equal(t, "RTS", q.State)
	require.Equal(t, 1, q.RecvQueued)
	require.Equal(t, 1024, q.PathMTU)
	require.Equal(t, "::ffff:127.0.0.2", q.DGID)
	require.Equal(t, uint64(1), q.RxPackets, "the SEND")
	require.Positive(t, q.TxPackets, "its ACK")
	var mrs []control.MR
	require.NoError(t, c.Call(ctx, control.Request{Op: control.OpRes, Object: "mr"}, &mrs))
	require.Len(t, mrs, 2)
	require.Equal(t, "buf", mrs[0].Name)
	var stat control.Stat
	require.NoError(t, c.Call(ctx, control.Request{Op: control.OpStat}, &stat))
	require.Equal(t, "sent_pkts", stat.Names[0])
	require.GreaterOrEqual(t, stat.Counters["rcvd_pkts"], uint64(1))
	require.GreaterOrEqual(t, stat.Counters["sent_pkts"], uint64(1)) // the ACK

	// The trace stream, from the packets the ring still holds: the
	// SEND received and the ACK sent.
	trace := make(chan *control.Packet, 64)
	tctx, tcancel := context.WithCancel(ctx)
	defer tcancel()
	tc := dial(t, d)
	go func() {
		_ = tc.Trace(tctx, 64, func(p *control.Packet, _ uint64) error { trace <- p; return nil })
	}()
	seen := map[string]bool{}
	for !seen["received RC Send Only"] || !seen["sent RC Acknowledge"] {
		p := <-trace
		seen[p.Dir+" "+p.Summary] = true
		if p.Dir == "received" {
			require.Equal(t, d.Listen().String(), p.Dst)
			require.Equal(t, cli.dev.Config().Addrs[0].String(), netip.MustParseAddrPort(p.Src).Addr().String())
			// Data is the whole packet: its ICRC checks.
			src, dst := netip.MustParseAddrPort(p.Src), netip.MustParseAddrPort(p.Dst)
			n := wire.Net{Src: src.Addr(), Dst: dst.Addr(), SrcPort: src.Port(), DstPort: dst.Port(),
				TrafficClass: p.TrafficClass, HopLimit: p.HopLimit, DontFragment: true}
			var wp wire.Packet
			require.Equal(t, wire.DropNone, wire.ParseDatagram(p.Data, &n, &wp))
		}
	}
}

// TestSecondDaemonSameAddress: a daemon on a taken UDP address fails at
// once, saying what may own the port; one on a taken control socket
// too; neither disturbs the first.
func TestSecondDaemonSameAddress(t *testing.T) {
	d := start(t, nil)
	_, err := daemon.Start(daemon.Config{Listen: d.Listen(), Control: filepath.Join(t.TempDir(), "other.sock")})
	require.ErrorIs(t, err, daemon.ErrAddrInUse)
	require.ErrorContains(t, err, "UDP "+d.Listen().String()+" is in use")
	require.ErrorContains(t, err, "another softhca daemon or program")
	_, err = daemon.Start(daemon.Config{Listen: lo, Control: d.ControlPath()})
	require.ErrorIs(t, err, daemon.ErrAddrInUse)
	require.ErrorContains(t, err, "another softhca daemon answers there")
	var st control.Status
	require.NoError(t, dial(t, d).Call(context.Background(), control.Request{Op: control.OpStatus}, &st))
}

// TestStopFlushes: stopping the daemon completes every outstanding work
// request of its QPs (a flush error each), and removes the socket.
func TestStopFlushes(t *testing.T) {
	pl, pport := peerLink(t)
	var logs syncBuffer
	cfg := daemon.Config{Listen: lo, PeerPort: pport, Control: filepath.Join(t.TempDir(), "d.sock"),
		Log: slog.New(slog.NewTextHandler(&logs, nil))}
	d, err := daemon.Start(cfg)
	require.NoError(t, err)
	p := newPeer(t, d.Device())
	other := newPeer(t, openPeerDevice(t, pl, d.Listen().Port()))
	connectRC(t, p, other)
	for i := range 3 {
		_, err := p.qp.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{p.mr.SGE(0, 64)}})
		require.NoError(t, err)
	}
	require.NoError(t, d.Stop())
	require.NoError(t, d.Stop()) // once
	wcs := make([]verbs.WC, 8)
	n := p.cq.Poll(wcs)
	require.Equal(t, 3, n)
	for _, wc := range wcs[:n] {
		require.Equal(t, verbs.WCWRFlushErr, wc.Status)
	}
	_, err = os.Stat(cfg.Control)
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = control.Dial(cfg.Control)
	require.ErrorIs(t, err, control.ErrNoDaemon)
	require.Contains(t, logs.String(), "msg=flushed qps=1 outstanding_wrs=0 cq_overruns=0 completions_unpolled=3")
}

// TestStopReportsOverrun: a CQ too small for the flush of its QP's work
// requests overruns, completions are lost, and Stop says so.
func TestStopReportsOverrun(t *testing.T) {
	d, err := daemon.Start(daemon.Config{Listen: lo, Control: filepath.Join(t.TempDir(), "d.sock")})
	require.NoError(t, err)
	dev := d.Device()
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	cq, err := dev.CreateCQ(1, nil, nil, 0)
	require.NoError(t, err)
	buf := make([]byte, 64)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	require.NoError(t, err)
	qp, err := pd.CreateQP(&hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	require.NoError(t, qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	for i := range 8 {
		_, err := qp.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{mr.SGE(0, 64)}})
		require.NoError(t, err)
	}
	err = d.Stop()
	require.ErrorContains(t, err, "CQs had overrun: completions were lost")
}

// TestMetrics: the Prometheus exposition has the device's counters, and
// promtool (Debian's prometheus package) accepts it when installed.
func TestMetrics(t *testing.T) {
	d := start(t, func(c *daemon.Config) { c.Metrics = "127.0.0.1:0" })
	resp, err := http.Get("http://" + d.MetricsAddr() + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	text := string(body)
	for _, want := range []string{
		`softhca_sent_pkts_total{device="softhca0"} 0`,
		`# TYPE softhca_rcvd_pkts_total counter`,
		`softhca_objects{device="softhca0",kind="qp"} 0`,
		`# HELP softhca_dropped_packets_total Packets dropped, by reason.`,
		`softhca_dropped_packets_total{device="softhca0",reason="unknown destination QP"} 0`,
	} {
		require.Contains(t, text, want)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (apt-get install prometheus): the exposition was not checked with it")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "promtool check metrics:\n%s", out)
}

// TestHTTPAPI: the web page and its JSON are served.
func TestHTTPAPI(t *testing.T) {
	d := start(t, func(c *daemon.Config) { c.HTTP = "127.0.0.1:0" })
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + d.HTTPAddr() + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	code, body := get("/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "<title>softhca</title>")
	code, body = get("/api/status")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `"ifname":"softhca0"`)
	code, body = get("/api/res/ah")
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, body, `unknown object "ah"`)
	code, _ = get("/api/trace?recent=x")
	require.Equal(t, http.StatusBadRequest, code)
}

// TestParseRegion: the accepted forms and the refused ones.
func TestParseRegion(t *testing.T) {
	r, err := daemon.ParseRegion("buf:4K:rw")
	require.NoError(t, err)
	require.Equal(t, daemon.Region{Name: "buf", Size: 4096, Access: verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite}, r)
	r, err = daemon.ParseRegion("atom:8")
	require.NoError(t, err)
	require.Equal(t, verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic, r.Access)
	for in, msg := range map[string]string{
		"buf":         "want NAME:SIZE[:ACCESS]",
		":1K":         "the name must be non-empty",
		"b:0":         "not within 1..1G",
		"b:2G":        "larger than 1G",
		"b:1x":        `size "1x"`,
		"b:1K:rx":     `access "x"`,
		"b:1K:":       "empty access",
		"b:1K:r:more": "want NAME:SIZE[:ACCESS]",
	} {
		_, err := daemon.ParseRegion(in)
		require.ErrorContains(t, err, msg, in)
	}
}

// TestDuplicateRegion: two regions of one name are refused, and nothing
// stays open (the address can be bound again).
func TestDuplicateRegion(t *testing.T) {
	addr := netip.MustParseAddrPort("127.0.0.1:0")
	_, err := daemon.Start(daemon.Config{Listen: addr, Control: filepath.Join(t.TempDir(), "d.sock"),
		Regions: []daemon.Region{{Name: "a", Size: 8, Access: verbs.AccessLocalWrite}, {Name: "a", Size: 8, Access: verbs.AccessLocalWrite}}})
	require.ErrorIs(t, err, syscall.EINVAL)
	require.True(t, strings.Contains(err.Error(), `region "a" is named twice`), err.Error())
}

// TestHTTPHostCheck: a request whose Host is a foreign name (a DNS
// rebinding page in the user's browser) is refused; IP addresses,
// localhost and the machine's name pass.
func TestHTTPHostCheck(t *testing.T) {
	d := start(t, func(c *daemon.Config) { c.HTTP = "127.0.0.1:0" })
	hostname, _ := os.Hostname()
	for host, want := range map[string]int{
		"evil.example:8791":   http.StatusForbidden,
		"evil.example":        http.StatusForbidden,
		"localhost.evil.test": http.StatusForbidden,
		"127.0.0.1:8791":      http.StatusOK,
		"[::1]:8791":          http.StatusOK,
		"localhost:8791":      http.StatusOK,
		"LOCALHOST.":          http.StatusOK,
		hostname:              http.StatusOK,
	} {
		req, err := http.NewRequest("GET", "http://"+d.HTTPAddr()+"/api/status", nil)
		require.NoError(t, err)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, "Host %q", host)
	}
}

// TestLimits: --limit lowers a device limit, which the device enforces
// and devinfo reports; names and values out of range are refused.
func TestLimits(t *testing.T) {
	var attr verbs.DeviceAttr
	require.NoError(t, daemon.SetLimit(&attr, "max_qp=2"))
	require.NoError(t, daemon.SetLimit(&attr, "max_mr_size=0x100000"))
	for in, msg := range map[string]string{
		"max_qp":            "want NAME=VALUE",
		"max_frob=1":        `limit "max_frob": unknown; the limits are max_mr_size, max_qp,`,
		"max_qp=x":          `want a number`,
		"max_qp=0":          "want 1..",
		"max_qp=2000000000": "not raised above the default",
	} {
		require.ErrorContains(t, daemon.SetLimit(&attr, in), msg, in)
	}
	d := start(t, func(c *daemon.Config) { c.Attr = attr })
	dev := d.Device()
	require.Equal(t, uint32(2), dev.QueryDevice().MaxQP)
	require.Equal(t, uint64(1<<20), dev.QueryDevice().MaxMRSize)
	require.Equal(t, hca.DefaultDeviceAttr().MaxCQ, dev.QueryDevice().MaxCQ, "the others keep their defaults")
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	cq, err := dev.CreateCQ(4, nil, nil, 0)
	require.NoError(t, err)
	caps := verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}
	for range 2 {
		_, err := pd.CreateQP(&hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeRC, Cap: caps})
		require.NoError(t, err)
	}
	_, err = pd.CreateQP(&hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeRC, Cap: caps})
	require.ErrorIs(t, err, syscall.ENOMEM)
	var dv devinfo.Device
	require.NoError(t, dial(t, d).Call(context.Background(), control.Request{Op: control.OpDevinfo}, &dv))
	require.Equal(t, uint32(2), dv.VerbsAttr().MaxQP)
}

// TestHTTPStreamLimit: the web server holds at most 16 packet streams;
// one more is refused at once with 503.
func TestHTTPStreamLimit(t *testing.T) {
	d := start(t, func(c *daemon.Config) { c.HTTP = "127.0.0.1:0" })
	url := "http://" + d.HTTPAddr() + "/api/trace"
	var open []*http.Response
	defer func() {
		for _, r := range open {
			r.Body.Close()
		}
	}()
	for range 16 {
		resp, err := http.Get(url) // returns once the headers came: the stream is counted
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		open = append(open, resp)
	}
	resp, err := http.Get(url)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Contains(t, string(body), "16 packet streams are open already")
}
