package hca_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/verbs"
	"github.com/stretchr/testify/require"
)

// TestPublicTypesHideTheEngine: the objects an application holds have no
// engine-side method (posting completions, taking receive WQEs, counting
// users, the transport's Endpoint), and no method takes or returns a type
// of the packages below hca (cq, qp, mr, srq, transport, internal/...):
// a program names hca and verbs types only.
func TestPublicTypesHideTheEngine(t *testing.T) {
	engineMethods := []string{"Push", "Take", "TakeIfFits", "AddUser", "RemoveUser", "Acquire", "Users",
		"SetOverrunHandler", "Events", "Receive", "Run", "Timer", "Owner", "Wait"}
	below := []string{"/cq", "/qp", "/mr", "/srq", "/transport", "/internal/"}
	for _, v := range []any{(*hca.QP)(nil), (*hca.CQ)(nil), (*hca.MR)(nil), (*hca.SRQ)(nil),
		(*hca.CompChannel)(nil), (*hca.PD)(nil), (*hca.Device)(nil), (*hca.AH)(nil)} {
		typ := reflect.TypeOf(v)
		for i := range typ.NumMethod() {
			m := typ.Method(i)
			for _, bad := range engineMethods {
				if m.Name == bad {
					t.Errorf("%v has the engine-side method %s", typ, m.Name)
				}
			}
			var types []reflect.Type
			for j := range m.Type.NumIn() {
				types = append(types, m.Type.In(j))
			}
			for j := range m.Type.NumOut() {
				types = append(types, m.Type.Out(j))
			}
			for _, x := range types {
				for x.Kind() == reflect.Pointer || x.Kind() == reflect.Slice {
					x = x.Elem()
				}
				if x == reflect.TypeOf(hca.Stats{}) {
					continue // hca's alias of the transport's counters, a plain value
				}
				for _, b := range below {
					if p := x.PkgPath(); strings.HasPrefix(p, "github.com/softhca/softhca"+b) {
						t.Errorf("%v.%s names %v, from below hca", typ, m.Name, x)
					}
				}
			}
		}
	}
}

// noLink is a device without a transport: verbs work, posted work stays
// queued, and moving a QP to ERR flushes it to the CQ.
type noLink struct {
	dev *hca.Device
	pd  *hca.PD
	mr  *hca.MR
	ch  *hca.CompChannel
	cq  *hca.CQ
	qp  *hca.QP
}

func openNoLink(t *testing.T, typ verbs.QPType) *noLink {
	t.Helper()
	var s noLink
	var err error
	s.dev, err = hca.Open(hca.Config{Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.dev.Close() })
	s.pd, err = s.dev.AllocPD()
	require.NoError(t, err)
	s.mr, err = s.pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
	require.NoError(t, err)
	s.ch, err = s.dev.CreateCompChannel()
	require.NoError(t, err)
	s.cq, err = s.dev.CreateCQ(16, s.ch, "cq context", 0)
	require.NoError(t, err)
	s.qp, err = s.pd.CreateQP(&hca.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, QPType: typ, Context: "qp context",
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	return &s
}

// flushOne posts a receive (moving a QP in RESET to INIT first) and moves
// the QP to ERR, which completes it with IBV_WC_WR_FLUSH_ERR.
func (s *noLink) flushOne(t *testing.T, wrid uint64) {
	t.Helper()
	if s.qp.State() == verbs.QPStateReset {
		require.NoError(t, s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1},
			verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	}
	_, err := s.qp.PostRecv(&verbs.RecvWR{WRID: wrid, SGList: []verbs.SGE{s.mr.SGE(0, 64)}})
	require.NoError(t, err)
	require.NoError(t, s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.AttrState))
}

func TestAccessorsReturnHCATypes(t *testing.T) {
	s := openNoLink(t, verbs.QPTypeRC)
	require.Same(t, s.cq, s.qp.SendCQ())
	require.Same(t, s.cq, s.qp.RecvCQ())
	require.Nil(t, s.qp.SRQ())
	require.Same(t, s.pd, s.qp.PD())
	require.Equal(t, "qp context", s.qp.Context())
	require.Equal(t, verbs.QPTypeRC, s.qp.Type())
	require.Equal(t, uint32(4), s.qp.Cap().MaxSendWR)
	require.Same(t, s.pd, s.mr.PD())
	require.Same(t, s.ch, s.cq.Channel())
	require.Equal(t, "cq context", s.cq.Context())
	require.Equal(t, 16, s.cq.CQE())

	srq, err := s.pd.CreateSRQ(&hca.SRQInitAttr{Context: "srq context", Attr: verbs.SRQAttr{MaxWR: 4, MaxSGE: 1}})
	require.NoError(t, err)
	require.Same(t, s.pd, srq.PD())
	require.Equal(t, "srq context", srq.Context())
	q, err := s.pd.CreateQP(&hca.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, SRQ: srq, QPType: verbs.QPTypeUD,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxSendSGE: 1}})
	require.NoError(t, err)
	require.Same(t, srq, q.SRQ())
	require.ErrorIs(t, srq.Destroy(context.Background()), syscall.EBUSY)
	require.ErrorIs(t, s.cq.Destroy(context.Background()), syscall.EBUSY)
	require.NoError(t, q.Destroy(context.Background()))
	require.NoError(t, srq.Destroy(context.Background()))

	// A completion event names the *hca.CQ.
	require.NoError(t, s.cq.ReqNotify(false))
	s.flushOne(t, 7)
	got, err := s.ch.GetEvent(context.Background())
	require.NoError(t, err)
	require.Same(t, s.cq, got)
	require.ErrorIs(t, s.ch.Close(), syscall.EBUSY, "a CQ uses the channel")
	got.AckEvents(1)
	require.NoError(t, s.qp.Destroy(context.Background()))
	require.NoError(t, s.cq.Destroy(context.Background()))
	require.NoError(t, s.ch.Close())
}

func TestPollWaitWakesOnCompletion(t *testing.T) {
	s := openNoLink(t, verbs.QPTypeRC)
	type result struct {
		n   int
		err error
		wc  verbs.WC
	}
	done := make(chan result, 1)
	go func() {
		wcs := make([]verbs.WC, 4)
		n, err := s.cq.PollWait(context.Background(), wcs)
		done <- result{n, err, wcs[0]}
	}()
	time.Sleep(10 * time.Millisecond) // let it block (it returns correctly either way)
	select {
	case r := <-done:
		t.Fatalf("PollWait returned %+v on an empty CQ", r)
	default:
	}
	s.flushOne(t, 7)
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, 1, r.n)
	require.Equal(t, uint64(7), r.wc.WRID)
	require.Equal(t, verbs.WCWRFlushErr, r.wc.Status)
}

func TestPollWaitInterrupted(t *testing.T) {
	s := openNoLink(t, verbs.QPTypeRC)
	wcs := make([]verbs.WC, 1)

	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	n, err := s.cq.PollWait(ctx, wcs)
	require.Zero(t, n)
	require.ErrorIs(t, err, syscall.EINTR)
	require.ErrorIs(t, err, context.Canceled)

	dl, cancel2 := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel2()
	_, err = s.cq.PollWait(dl, wcs)
	require.ErrorIs(t, err, syscall.EINTR)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// A completion already queued is returned even when ctx is done.
	s.flushOne(t, 9)
	n, err = s.cq.PollWait(ctx, wcs)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	_, err = s.cq.PollWait(context.Background(), nil)
	require.ErrorIs(t, err, syscall.EINVAL, "no room for a completion")
}

// TestPollWaitLeavesReqNotifyAlone: a PollWait in progress neither takes
// the arm of a ReqNotify made meanwhile nor adds events: the completion
// wakes the waiter and fires the arm's one event, which GetEvent returns.
func TestPollWaitLeavesReqNotifyAlone(t *testing.T) {
	s := openNoLink(t, verbs.QPTypeRC)
	done := make(chan error, 1)
	go func() {
		wcs := make([]verbs.WC, 4)
		_, err := s.cq.PollWait(context.Background(), wcs)
		done <- err
	}()
	time.Sleep(5 * time.Millisecond)
	require.NoError(t, s.cq.ReqNotify(false))
	s.flushOne(t, 3)
	require.NoError(t, <-done)

	s.ch.SetNonBlocking(true)
	got, err := s.ch.GetEvent(context.Background())
	require.NoError(t, err, "the arm fired")
	require.Same(t, s.cq, got)
	_, err = s.ch.GetEvent(context.Background())
	require.ErrorIs(t, err, syscall.EAGAIN, "exactly one event")
	s.cq.AckEvents(1)

	// And the other way round: an armed CQ whose event was taken by
	// GetEvent still wakes a PollWait.
	require.NoError(t, s.cq.ReqNotify(false))
	_, err = s.qp.PostRecv(&verbs.RecvWR{WRID: 4, SGList: []verbs.SGE{s.mr.SGE(0, 64)}}) // flushed at once in ERR
	require.NoError(t, err)
	n, err := s.cq.PollWait(context.Background(), make([]verbs.WC, 4))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = s.ch.GetEvent(context.Background())
	require.NoError(t, err)
	s.cq.AckEvents(1)
}

// TestPollWaitMovesData runs a send over UDP loopback and waits for both
// completions with PollWait, with and without busy polling (where it
// drives the transport).
func TestPollWaitMovesData(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(map[bool]string{false: "sleep", true: "busypoll"}[busy], func(t *testing.T) {
			la, err := udp.Open(udp.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")})
			require.NoError(t, err)
			lb, err := udp.Open(udp.Config{Addr: netip.MustParseAddrPort("127.0.0.2:0")})
			require.NoError(t, err)
			pa, _ := la.LocalAddr()
			pb, _ := lb.LocalAddr()
			a := openSideConfig(t, hca.Config{Link: la, PeerPort: pb.SrcPort, BusyPoll: busy}, 1<<16)
			b := openSideConfig(t, hca.Config{Link: lb, PeerPort: pa.SrcPort, BusyPoll: busy}, 1<<16)
			connect(t, a, b, verbs.QPTypeRC, verbs.MTU1024)

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			wcs := make([]verbs.WC, 4)
			recv := make(chan error, 1)
			go func() {
				n, err := b.cq.PollWait(ctx, wcs[2:])
				if err == nil && (n != 1 || wcs[2].Status != verbs.WCSuccess || wcs[2].ByteLen != 3000) {
					err = errors.New("unexpected receive completion " + wcs[2].Status.String())
				}
				recv <- err
			}()
			_, err = b.qp.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{b.mr.SGE(0, 4096)}})
			require.NoError(t, err)
			_, err = a.qp.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.mr.SGE(0, 3000)}})
			require.NoError(t, err)
			n, err := a.cq.PollWait(ctx, wcs[:2])
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Equal(t, verbs.WCSuccess, wcs[0].Status, wcs[0].Status.String())
			require.NoError(t, <-recv)
		})
	}
}

func TestConnectDefaults(t *testing.T) {
	s := openNoLink(t, verbs.QPTypeRC)
	gid := verbs.GIDFromAddr(netip.MustParseAddr("192.0.2.9"))
	require.NoError(t, s.qp.Connect(hca.Remote{QPN: 0x123, PSN: 0x456, GID: gid}, nil))
	a := s.qp.Query()
	require.Equal(t, verbs.QPStateRTS, a.QPState)
	require.Equal(t, uint8(1), a.PortNum)
	require.Zero(t, a.PKeyIndex)
	require.Zero(t, a.QPAccessFlags, "SEND only, as ibv_rc_pingpong")
	require.Equal(t, verbs.MTU1024, a.PathMTU, "the port's active MTU")
	require.Equal(t, uint32(0x123), a.DestQPNum)
	require.Equal(t, uint32(0x456), a.RQPSN)
	require.Zero(t, a.SQPSN)
	require.Equal(t, verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: gid, SGIDIndex: 1, HopLimit: 1}}, a.AHAttr)
	require.Equal(t, uint8(12), a.MinRNRTimer)
	require.Equal(t, uint8(14), a.Timeout)
	require.Equal(t, uint8(7), a.RetryCnt)
	require.Equal(t, uint8(7), a.RNRRetry)
	require.Equal(t, uint8(1), a.MaxRdAtomic)
	require.Equal(t, uint8(1), a.MaxDestRdAtomic)

	err := s.qp.Connect(hca.Remote{QPN: 0x123, GID: gid}, nil)
	require.ErrorIs(t, err, syscall.EINVAL, "a QP in RTS")
	require.Contains(t, err.Error(), "RTS")
}

func TestConnectOptions(t *testing.T) {
	s := openNoLink(t, verbs.QPTypeRC)
	gid := verbs.GIDFromAddr(netip.MustParseAddr("192.0.2.9"))
	access := verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	require.NoError(t, s.qp.Connect(hca.Remote{QPN: 0x77, GID: gid}, &hca.ConnectOptions{
		PathMTU: verbs.MTU4096, PSN: 0xabc, Access: access, HopLimit: 64, MinRNRTimer: 1, Timeout: 18,
		RetryCnt: 3, RNRRetry: 2, MaxRdAtomic: 8, MaxDestRdAtomic: 4}))
	a := s.qp.Query()
	require.Equal(t, verbs.QPStateRTS, a.QPState)
	require.Equal(t, access, a.QPAccessFlags)
	require.Equal(t, verbs.MTU4096, a.PathMTU)
	require.Equal(t, uint32(0xabc), a.SQPSN)
	require.Equal(t, uint8(64), a.AHAttr.GRH.HopLimit)
	require.Equal(t, [6]uint8{1, 18, 3, 2, 8, 4}, [6]uint8{a.MinRNRTimer, a.Timeout, a.RetryCnt, a.RNRRetry, a.MaxRdAtomic, a.MaxDestRdAtomic})
}

func TestConnectFromInitKeepsInitAttributes(t *testing.T) {
	s := openNoLink(t, verbs.QPTypeRC)
	require.NoError(t, s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QPAccessFlags: verbs.AccessRemoteRead},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	// Receives may be posted in INIT, before the peer is known.
	_, err := s.qp.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{s.mr.SGE(0, 64)}})
	require.NoError(t, err)
	require.NoError(t, s.qp.Connect(hca.Remote{QPN: 0x77, GID: verbs.GIDFromAddr(netip.MustParseAddr("192.0.2.9"))}, nil))
	a := s.qp.Query()
	require.Equal(t, verbs.QPStateRTS, a.QPState)
	require.Equal(t, verbs.AccessRemoteRead, a.QPAccessFlags)
}

func TestConnectUCAndUD(t *testing.T) {
	uc := openNoLink(t, verbs.QPTypeUC)
	require.NoError(t, uc.qp.Connect(hca.Remote{QPN: 0x77, PSN: 5, GID: verbs.GIDFromAddr(netip.MustParseAddr("192.0.2.9"))},
		&hca.ConnectOptions{Access: verbs.AccessRemoteWrite}))
	a := uc.qp.Query()
	require.Equal(t, verbs.QPStateRTS, a.QPState)
	require.Equal(t, uint32(5), a.RQPSN)
	require.Equal(t, verbs.AccessRemoteWrite, a.QPAccessFlags)

	ud := openNoLink(t, verbs.QPTypeUD)
	require.NoError(t, ud.qp.Connect(hca.Remote{}, nil))
	a = ud.qp.Query()
	require.Equal(t, verbs.QPStateRTS, a.QPState)
	require.Equal(t, uint32(0x11111111), a.QKey, "ibv_ud_pingpong's Q_Key")

	ud2 := openNoLink(t, verbs.QPTypeUD)
	require.NoError(t, ud2.qp.Connect(hca.Remote{}, &hca.ConnectOptions{QKey: 0x1234, PSN: 9}))
	a = ud2.qp.Query()
	require.Equal(t, uint32(0x1234), a.QKey)
	require.Equal(t, uint32(9), a.SQPSN)
}

// TestConnectNamesTheFailedStep: an invalid attribute fails its step
// with Modify's error, and the steps before it stay done.
func TestConnectNamesTheFailedStep(t *testing.T) {
	s := openNoLink(t, verbs.QPTypeRC)
	err := s.qp.Connect(hca.Remote{QPN: 0x77, GID: verbs.GIDFromAddr(netip.MustParseAddr("192.0.2.9"))},
		&hca.ConnectOptions{SGIDIndex: 9})
	require.ErrorIs(t, err, syscall.EINVAL)
	var ve *verbs.Error
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "modify_qp", ve.Op)
	require.Contains(t, err.Error(), "to RTR")
	require.Equal(t, verbs.QPStateInit, s.qp.State())

	s2 := openNoLink(t, verbs.QPTypeRC)
	err = s2.qp.Connect(hca.Remote{}, &hca.ConnectOptions{Port: 2})
	require.ErrorIs(t, err, syscall.EINVAL)
	require.Contains(t, err.Error(), "to INIT")
	require.Equal(t, verbs.QPStateReset, s2.qp.State())
}

// TestCloseClosesTheLink: the device owns its link once Open succeeds
// and closes it with itself; when Open fails, the link stays the
// caller's.
func TestCloseClosesTheLink(t *testing.T) {
	l, err := udp.Open(udp.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")})
	require.NoError(t, err)
	dev, err := hca.Open(hca.Config{Link: l})
	require.NoError(t, err)
	require.Equal(t, 1, dev.GIDIndex(netip.MustParseAddr("127.0.0.1")), "the link's address is GID 1")
	require.NoError(t, dev.Close())
	require.ErrorIs(t, l.Send(nil), net.ErrClosed, "closed by the device")
	require.ErrorIs(t, dev.Close(), syscall.EINVAL, "closed twice")

	wild, err := udp.Open(udp.Config{Addr: netip.MustParseAddrPort("0.0.0.0:0")})
	require.NoError(t, err)
	_, err = hca.Open(hca.Config{Link: wild})
	require.ErrorIs(t, err, syscall.EINVAL, "a wildcard-bound link")
	require.NoError(t, wild.Send(nil), "still open: the caller's")
	require.NoError(t, wild.Close())
}

// TestPollWaitDestroyed: a PollWait waiting (or spinning, with BusyPoll)
// on a CQ that is destroyed returns EINVAL, as does one called after.
func TestPollWaitDestroyed(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(map[bool]string{false: "sleep", true: "busypoll"}[busy], func(t *testing.T) {
			l, err := udp.Open(udp.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")})
			require.NoError(t, err)
			dev, err := hca.Open(hca.Config{Link: l, BusyPoll: busy})
			require.NoError(t, err)
			defer dev.Close()
			cq, err := dev.CreateCQ(4, nil, nil, 0)
			require.NoError(t, err)
			done := make(chan error, 1)
			go func() {
				_, err := cq.PollWait(context.Background(), make([]verbs.WC, 1))
				done <- err
			}()
			time.Sleep(5 * time.Millisecond)
			require.NoError(t, cq.Destroy(context.Background()))
			select {
			case err := <-done:
				require.ErrorIs(t, err, syscall.EINVAL)
			case <-time.After(5 * time.Second):
				t.Fatal("PollWait still waits on a destroyed CQ")
			}
			_, err = cq.PollWait(context.Background(), make([]verbs.WC, 1))
			require.ErrorIs(t, err, syscall.EINVAL)
		})
	}
}
