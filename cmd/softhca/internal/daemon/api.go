package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"github.com/softhca/softhca/cmd/softhca/internal/control"
	"github.com/softhca/softhca/cmd/softhca/internal/devinfo"
	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// comm is the command name res reports for the daemon's objects.
const comm = "softhca"

// api answers the control requests (control.Handler).
type api struct{ d *Daemon }

func (a *api) Call(_ context.Context, r control.Request) (any, error) {
	d := a.d
	switch r.Op {
	case control.OpStatus:
		return d.Status(), nil
	case control.OpRes:
		return d.Res(r.Object)
	case control.OpStat:
		return d.Stat(), nil
	case control.OpDevinfo:
		return devinfo.FromDevice(d.dev)
	default:
		return nil, control.Errorf(syscall.EINVAL, "%s cannot be called; it streams", r.Op)
	}
}

// Status is the daemon's status.
func (d *Daemon) Status() control.Status {
	now := d.now()
	st := d.dev.TransportStats()
	res := d.dev.Resources()
	s := control.Status{
		Version: d.cfg.Version, PID: pid,
		Started: d.started.UTC().Format(time.RFC3339), Uptime: now.Sub(d.started).Seconds(),
		Device: d.cfg.Name, Listen: d.listen.String(),
		ActiveMTU: d.dev.Config().PortAttr.ActiveMTU.Bytes(),
		Control:   d.control, HTTP: d.httpAddr, Metrics: d.metAddr,
		Services: d.serviceList(), Regions: d.regionList(),
		Objects:   map[string]int{"pd": len(res.PDs), "mr": len(res.MRs), "cq": len(res.CQs), "qp": len(res.QPs), "srq": len(res.SRQs)},
		RxPackets: st.RxPackets, TxPackets: st.TxPackets, Dropped: st.Dropped(),
	}
	if name, mac := d.Tap(); name != "" {
		s.Tap, s.MAC = name, mac.String()
	}
	// The table's entries in use (index 0, the link-local GID, and one
	// per address), as ibv_devinfo -v lists them.
	for i := 0; ; i++ {
		g, err := d.dev.QueryGID(1, i)
		if err != nil || g == (verbs.GID{}) {
			break
		}
		s.GIDs = append(s.GIDs, gidText(g))
	}
	return s
}

func (d *Daemon) regionList() []control.Region {
	out := []control.Region{}
	for _, r := range d.regions {
		out = append(out, control.Region{Name: r.Name, Addr: r.mr.Addr(), Length: uint64(r.Size),
			RKey: r.mr.RKey(), LKey: r.mr.LKey(), PD: d.pd.Handle(), Access: AccessNames(r.Access)})
	}
	return out
}

// Res lists the objects of one kind ("pd", "mr", "cq", "qp", "srq").
func (d *Daemon) Res(object string) (any, error) {
	res := d.dev.Resources()
	name := d.cfg.Name
	switch object {
	case "pd":
		out := []control.PD{}
		for _, p := range res.PDs {
			out = append(out, control.PD{Device: name, PDN: p.Handle, Users: p.Users, PID: pid, Comm: comm})
		}
		return out, nil
	case "mr":
		names := map[uint32]string{}
		for _, r := range d.regions {
			names[r.mr.LKey()] = r.Name
		}
		out := []control.MR{}
		for _, m := range res.MRs {
			out = append(out, control.MR{Device: name, RKey: m.RKey, LKey: m.LKey, Len: m.Length, Addr: m.Addr,
				PDN: m.PD, Access: AccessNames(m.Access), Name: names[m.LKey], PID: pid, Comm: comm})
		}
		return out, nil
	case "cq":
		out := []control.CQ{}
		for _, c := range res.CQs {
			out = append(out, control.CQ{Device: name, CQN: c.Num, CQE: c.CQE, Users: c.Users, Queued: c.Queued,
				Channel: c.Channel, Error: c.InError, PID: pid, Comm: comm})
		}
		return out, nil
	case "qp":
		out := []control.QP{}
		for _, q := range res.QPs {
			out = append(out, qpJSON(name, q))
		}
		return out, nil
	case "srq":
		users := map[uint32][]uint32{}
		for _, q := range res.QPs {
			if q.SRQ != 0 {
				users[q.SRQ] = append(users[q.SRQ], q.QPN)
			}
		}
		out := []control.SRQ{}
		for _, s := range res.SRQs {
			typ := "BASIC"
			if s.TM {
				typ = "TM"
			}
			lqpn := users[s.Num]
			if lqpn == nil {
				lqpn = []uint32{}
			}
			out = append(out, control.SRQ{Device: name, SRQN: s.Num, Type: typ, LQPN: lqpn, PDN: s.PD,
				MaxWR: s.Attr.MaxWR, MaxSGE: s.Attr.MaxSGE, Limit: s.Attr.SRQLimit, Queued: s.Queued, CQN: s.CQ,
				PID: pid, Comm: comm})
		}
		return out, nil
	}
	return nil, control.Errorf(syscall.EINVAL, "res: unknown object %q", object)
}

func qpJSON(dev string, q hca.QPInfo) control.QP {
	a := &q.Attr
	j := control.QP{Device: dev, Port: 1, LQPN: q.QPN, Type: q.Type.String(), State: a.QPState.String(),
		RQPSN: a.RQPSN, SQPSN: a.SQPSN, PathMigState: migState(a.PathMigState), PDN: q.PD,
		SendCQN: q.SendCQ, RecvCQN: q.RecvCQ, SRQN: q.SRQ,
		SendQueued: q.SendQueued, RecvQueued: q.RecvQueued, PID: pid, Comm: comm}
	c := &q.Counters
	j.TxPackets, j.TxBytes, j.RxPackets = c.TxPackets, c.TxBytes, c.RxPackets
	j.Retransmits, j.RetxPackets, j.RetryTimeouts = c.Retransmits, c.RetransmittedPackets, c.RetryTimeouts
	j.RNRNAKsSent, j.RNRNAKsReceived, j.SeqNAKsSent, j.SeqNAKsReceived = c.RNRNAKsSent, c.RNRNAKsReceived, c.SeqNAKsSent, c.SeqNAKsReceived
	if q.Type == verbs.QPTypeUD {
		return j
	}
	j.RQPN = a.DestQPNum
	if a.QPState >= verbs.QPStateRTR && a.QPState != verbs.QPStateErr {
		if a.PathMTU.Valid() {
			j.PathMTU = a.PathMTU.Bytes()
		}
		if a.AHAttr.IsGlobal {
			j.DGID = gidText(a.AHAttr.GRH.DGID)
		}
	}
	return j
}

// gidText writes a GID as ibv_devinfo -v does: an IPv6 address
// (inet_ntop), "::ffff:10.0.0.1" for an IPv4 one.
func gidText(g verbs.GID) string { return netip.AddrFrom16(g).String() }

func migState(m verbs.MigState) string {
	switch m {
	case verbs.MigMigrated:
		return "MIGRATED"
	case verbs.MigRearm:
		return "REARM"
	case verbs.MigArmed:
		return "ARMED"
	}
	return fmt.Sprintf("%d", m)
}

// Stat is the device's counters.
func (d *Daemon) Stat() control.Stat {
	st := d.dev.TransportStats()
	s := control.Stat{Device: d.cfg.Name, Port: 1, Counters: map[string]uint64{}, Drops: st.DropNames()}
	for _, c := range statCounters(st) {
		s.Names = append(s.Names, c.name)
		s.Counters[c.name] = c.value
	}
	return s
}

type namedValue struct {
	name  string
	value uint64
	help  string
}

// statCounters names the counters: rxe's hw_counters names where rxe has
// the counter (rdma statistic shows those for rxe), softhca's own after.
func statCounters(st hca.Stats) []namedValue {
	return []namedValue{
		{"sent_pkts", st.TxPackets, "RoCEv2 packets sent"},
		{"rcvd_pkts", st.RxPackets, "RoCEv2 packets received"},
		{"duplicate_request", st.Drops[hca.DropDuplicate], "duplicate requests received (answered again, not executed)"},
		{"out_of_seq_request", st.Drops[hca.DropOutOfSequence], "requests received beyond the expected PSN"},
		{"rcvd_rnr_err", st.RNRNAKsReceived, "RNR NAKs received"},
		{"send_rnr_err", st.RNRNAKsSent, "RNR NAKs sent"},
		{"rcvd_seq_err", st.SeqNAKsReceived, "sequence error NAKs received"},
		{"seq_naks_sent", st.SeqNAKsSent, "sequence error NAKs sent"},
		{"acks_sent", st.AcksSent, "ACKs and NAKs sent"},
		{"duplicates_answered", st.DuplicatesAnswered, "duplicate requests answered (ACK, READ or ATOMIC replayed)"},
		{"retransmits", st.Retransmits, "go-back-N restarts (sequence NAK, timeout, RNR, implied NAK)"},
		{"retransmitted_pkts", st.RetransmittedPackets, "packets sent again"},
		{"retry_timeouts", st.RetryTimeouts, "transport timer expiries with PSNs outstanding"},
		{"window_increases", st.WindowIncreases, "ACKs that grew an RC congestion window"},
		{"window_cuts", st.WindowCuts, "RC congestion window halvings"},
		{"rate_cuts", st.RateCuts, "DCQCN rate cuts"},
		{"rate_increases", st.RateIncreases, "DCQCN rate increase periods"},
		{"ecn_marked_pkts", st.CEReceived, "packets received marked Congestion Experienced"},
		{"np_cnp_sent", st.CNPsSent, "CNPs sent"},
		{"rp_cnp_handled", st.CNPsReceived, "CNPs received"},
		{"tx_bytes", st.Link.TxBytes, "bytes sent by the link (UDP payload)"},
		{"rx_bytes", st.Link.RxBytes, "bytes received by the link (UDP payload)"},
		{"dropped_pkts", st.Dropped(), "packets dropped, for every reason (stat's drops list them)"},
	}
}

// Trace streams the traced packets, a batch at a time.
func (a *api) Trace(ctx context.Context, r control.Request, sink control.TraceSink) error {
	d := a.d
	if len(d.tr.slots) == 0 {
		return control.Errorf(syscall.EOPNOTSUPP, "the daemon keeps no packets (it was started with --trace-ring 0)")
	}
	from := d.tr.recent(r.Recent)
	var buf []traced
	for {
		var lost uint64
		var wake <-chan struct{}
		buf, from, lost, wake = d.tr.since(from, 256, buf)
		for i := range buf {
			if err := sink.Packet(d.packetJSON(&buf[i]), lost); err != nil {
				return err
			}
			lost = 0
		}
		if len(buf) > 0 {
			continue
		}
		if err := sink.Flush(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		}
	}
}

// packetJSON describes a traced packet.
func (d *Daemon) packetJSON(t *traced) *control.Packet {
	p := &control.Packet{Time: t.at.UnixNano(), Dir: "sent", TrafficClass: t.net.TrafficClass, HopLimit: t.net.HopLimit, Data: t.data}
	if t.dir == hca.Received {
		p.Dir = "received"
	}
	p.Src = netip.AddrPortFrom(t.net.Src, t.net.SrcPort).String()
	p.Dst = netip.AddrPortFrom(t.net.Dst, t.net.DstPort).String()
	if d.cfg.Summarize != nil {
		var wp wire.Packet
		n := t.net
		if len(t.data) < t.size {
			p.Summary = fmt.Sprintf("(%d of %d bytes kept)", len(t.data), t.size)
		} else if r := wire.ParseDatagram(t.data, &n, &wp); r != wire.DropNone {
			p.Summary = "DROP " + r.String()
		} else {
			p.Summary = d.cfg.Summarize(&wp)
		}
	}
	return p
}
