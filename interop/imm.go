package interop

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/verbs"
)

// This file is the host side of the immediate-data test: the protocol of
// the guest program shca-imm (guest/imm.c), spoken by softhca in this
// process. The comment at the top of imm.c describes it; the two must
// stay in step.

// immPattern is byte i of message k from side dir (0 client, 1 server).
func immPattern(dir, k, i int) byte {
	return byte(i*7 + (i>>8)*13 + k*29 + dir*101 + 1)
}

// immValue is the immediate of message k from side dir.
func immValue(dir, k int) uint32 { return 0x1A000000 | uint32(dir)<<16 | uint32(k) }

// immLine is the size of a connection line.
const immLine = 96

// immDest is one side's connection line.
type immDest struct {
	QPN, PSN, RKey uint32
	Addr           uint64
	GID            verbs.GID
}

func (d immDest) marshal() []byte {
	b := make([]byte, immLine)
	s := fmt.Sprintf("%06x %06x %08x %016x %s\n", d.QPN, d.PSN, d.RKey, d.Addr, hex.EncodeToString(d.GID[:]))
	copy(b, s)
	return b
}

func parseImmDest(b []byte) (immDest, error) {
	var d immDest
	f := strings.Fields(string(bytes.TrimRight(b, "\x00")))
	if len(f) != 5 {
		return d, fmt.Errorf("connection line %q: want 5 fields", b)
	}
	var vals [4]uint64
	for i := range vals {
		v, err := strconv.ParseUint(f[i], 16, 64)
		if err != nil {
			return d, fmt.Errorf("connection line %q: %w", b, err)
		}
		vals[i] = v
	}
	g, err := hex.DecodeString(f[4])
	if err != nil || len(g) != 16 {
		return d, fmt.Errorf("connection line %q: bad GID", b)
	}
	d.QPN, d.PSN, d.RKey, d.Addr = uint32(vals[0]), uint32(vals[1]), uint32(vals[2]), vals[3]
	copy(d.GID[:], g)
	return d, nil
}

// ImmConfig is one run of the exchange with shca-imm.
type ImmConfig struct {
	// Local is the softhca device's address (the bridge address, port
	// 4791).
	Local netip.AddrPort
	// Server is shca-imm's TCP address when softhca is the client; when it
	// is empty softhca is the server and accepts on Listener.
	Server   string
	Listener net.Listener
	UC       bool
	Size     int
	Count    int
	MTU      verbs.MTU
	// Log receives one line per completion, as shca-imm prints them.
	Log io.Writer
}

// ImmResult is what the softhca side saw.
type ImmResult struct {
	// Transport and Link are the softhca device's counters after the run.
	Transport hca.Stats
	Link      link.Stats
}

// RunImm runs softhca's side of the exchange and checks every message
// it receives; the error says which completion or byte was wrong.
func RunImm(ctx context.Context, cfg ImmConfig) (res ImmResult, err error) {
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	dev, closeDev, err := openHostDevice(cfg.Local, &res)
	if err != nil {
		return res, err
	}
	defer closeDev()
	size, count := cfg.Size, cfg.Count
	slot := size
	buf := make([]byte, 3*slot*count)
	recvOff, writeOff, sendOff := 0, slot*count, 2*slot*count
	pd, err := dev.AllocPD()
	if err != nil {
		return res, err
	}
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		return res, err
	}
	cq, err := dev.CreateCQ(2*count+2, nil, nil, 0)
	if err != nil {
		return res, err
	}
	typ := verbs.QPTypeRC
	if cfg.UC {
		typ = verbs.QPTypeUC
	}
	q, err := pd.CreateQP(&hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: typ,
		Cap: verbs.QPCap{MaxSendWR: uint32(count), MaxRecvWR: uint32(count), MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return res, err
	}
	if err := q.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QPAccessFlags: verbs.AccessRemoteWrite},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
		return res, fmt.Errorf("QP to INIT: %w", err)
	}
	for k := 0; k < count; k++ {
		if _, err := q.PostRecv(&verbs.RecvWR{WRID: uint64(1000 + k), SGList: []verbs.SGE{mr.SGE(recvOff+k*slot, size)}}); err != nil {
			return res, fmt.Errorf("post receive %d: %w", k, err)
		}
	}
	gid, err := dev.QueryGID(1, 1)
	if err != nil {
		return res, err
	}
	var psnb [4]byte
	rand.Read(psnb[:])
	me := immDest{QPN: q.Num(), PSN: binary.BigEndian.Uint32(psnb[:]) & 0xffffff, RKey: mr.RKey(),
		Addr: mr.Addr() + uint64(writeOff), GID: gid}

	client := cfg.Server != ""
	var conn net.Conn
	if client {
		d := net.Dialer{Timeout: 10 * time.Second}
		conn, err = d.DialContext(ctx, "tcp", cfg.Server)
	} else {
		conn, err = acceptCtx(ctx, cfg.Listener)
	}
	if err != nil {
		return res, err
	}
	defer conn.Close()
	stopWatch := context.AfterFunc(ctx, func() { conn.Close() })
	defer stopWatch()
	line := make([]byte, immLine)
	if client {
		if _, err := conn.Write(me.marshal()); err != nil {
			return res, err
		}
	}
	if _, err := io.ReadFull(conn, line); err != nil {
		return res, fmt.Errorf("reading shca-imm's connection line: %w", err)
	}
	peer, err := parseImmDest(line)
	if err != nil {
		return res, err
	}
	// INIT -> RTR -> RTS towards shca-imm's QP, with ibv_rc_pingpong's
	// attributes (Connect's defaults).
	if err := q.Connect(hca.Remote{QPN: peer.QPN, PSN: peer.PSN, GID: peer.GID},
		&hca.ConnectOptions{PathMTU: cfg.MTU, PSN: me.PSN}); err != nil {
		return res, err
	}
	one := make([]byte, 1)
	if client {
		if _, err := conn.Write([]byte{'g'}); err != nil {
			return res, err
		}
	} else {
		if _, err := conn.Write(me.marshal()); err != nil {
			return res, err
		}
		if _, err := io.ReadFull(conn, one); err != nil {
			return res, fmt.Errorf("waiting for shca-imm's go: %w", err)
		}
	}
	mydir, peerdir := 1, 0
	if client {
		mydir, peerdir = 0, 1
	}
	for k := 0; k < count; k++ {
		p := buf[sendOff+k*slot : sendOff+k*slot+size]
		for i := range p {
			p[i] = immPattern(mydir, k, i)
		}
		wr := &verbs.SendWR{WRID: uint64(k), SGList: []verbs.SGE{mr.SGE(sendOff+k*slot, size)},
			SendFlags: verbs.SendSignaled, Opcode: verbs.WRSendWithImm, ImmData: immValue(mydir, k)}
		if k%2 == 1 {
			wr.Opcode = verbs.WRRDMAWriteWithImm
			wr.RDMA = verbs.RDMAInfo{RemoteAddr: peer.Addr + uint64(k*slot), RKey: peer.RKey}
		}
		if _, err := q.PostSend(wr); err != nil {
			return res, fmt.Errorf("post send %d: %w", k, err)
		}
	}
	var problems []string
	nrecv, nsend := 0, 0
	deadline := time.Now().Add(60 * time.Second)
	wcs := make([]verbs.WC, 8)
	for nrecv < count || nsend < count {
		n := cq.Poll(wcs)
		if n == 0 {
			if time.Now().After(deadline) || ctx.Err() != nil {
				return res, fmt.Errorf("softhca: %d of %d receives and %d of %d sends completed before the deadline",
					nrecv, count, nsend, count)
			}
			time.Sleep(50 * time.Microsecond)
			continue
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				return res, fmt.Errorf("softhca: completion wr_id %d: status %v", wc.WRID, wc.Status)
			}
			if wc.WRID < 1000 {
				nsend++
				continue
			}
			k := nrecv
			nrecv++
			isWrite := k%2 == 1
			wantOp, data := verbs.WCRecv, buf[recvOff+k*slot:recvOff+k*slot+size]
			if isWrite {
				wantOp, data = verbs.WCRecvRDMAWithImm, buf[writeOff+k*slot:writeOff+k*slot+size]
			}
			var why []string
			if wc.Opcode != wantOp {
				why = append(why, fmt.Sprintf("opcode %v, want %v", wc.Opcode, wantOp))
			}
			if wc.WCFlags&verbs.WCFlagWithImm == 0 {
				why = append(why, "no WITH_IMM flag")
			}
			if want := immValue(peerdir, k); wc.ImmData != want {
				why = append(why, fmt.Sprintf("imm 0x%08x, want 0x%08x", wc.ImmData, want))
			}
			if wc.ByteLen != uint32(size) {
				why = append(why, fmt.Sprintf("byte_len %d, want %d", wc.ByteLen, size))
			}
			if wc.WRID != uint64(1000+k) {
				why = append(why, fmt.Sprintf("wr_id %d, want %d", wc.WRID, 1000+k))
			}
			for i, b := range data {
				if w := immPattern(peerdir, k, i); b != w {
					why = append(why, fmt.Sprintf("data byte %d is 0x%02x, want 0x%02x", i, b, w))
					break
				}
			}
			status := "ok"
			if len(why) > 0 {
				status = "BAD: " + strings.Join(why, "; ")
				problems = append(problems, fmt.Sprintf("message %d: %s", k, strings.Join(why, "; ")))
			}
			fmt.Fprintf(logw, "recv %d %v imm=0x%08x len=%d %s\n", k, wc.Opcode, wc.ImmData, wc.ByteLen, status)
		}
	}
	if _, err := conn.Write([]byte{'d'}); err != nil {
		return res, err
	}
	if _, err := io.ReadFull(conn, one); err != nil {
		return res, fmt.Errorf("waiting for shca-imm's done: %w", err)
	}
	if len(problems) > 0 {
		return res, fmt.Errorf("softhca received %d wrong messages: %s", len(problems), strings.Join(problems, "; "))
	}
	return res, nil
}

// openHostDevice opens the softhca device of an in-process exchange on
// local (UDP port 4791 on the bridge), with rxe's retry behaviour. Its
// closer records the device's and the link's counters in res, then
// closes the device.
func openHostDevice(local netip.AddrPort, res *ImmResult) (*hca.Device, func(), error) {
	lk, err := udp.Open(udp.Config{Addr: local, GSO: true, GRO: true, ECN: true})
	if err != nil {
		return nil, nil, fmt.Errorf("softhca link on %v: %w", local, err)
	}
	dev, err := hca.Open(hca.Config{Name: "softhca0", Link: lk, RxeRetryCompat: true})
	if err != nil {
		lk.Close()
		return nil, nil, err
	}
	return dev, func() {
		res.Transport = dev.TransportStats()
		res.Link = lk.Stats()
		dev.Close()
	}, nil
}

// acceptCtx accepts one connection, giving up when ctx is done.
func acceptCtx(ctx context.Context, l net.Listener) (net.Conn, error) {
	if l == nil {
		return nil, errors.New("no listener for the server side")
	}
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	c, err := l.Accept()
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("accept: %w", ctx.Err())
	}
	return c, err
}
