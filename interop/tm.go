package interop

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/verbs"
)

// This file is the host side of the tag-matching test: softhca's
// tag-matching SRQ receiving the messages of the guest program shca-tm
// (guest/tm.c) on Linux rxe, which has no tag matching of its own. The
// comment at the top of tm.c describes the messages; the two must stay in
// step.

// tmPattern is byte i of message k.
func tmPattern(k, i int) byte { return byte(i*7 + (i>>8)*13 + k*31 + 5) }

// tmTag is message k's tag.
func tmTag(k int) uint64 { return 0x5a00000000000000 | uint64(k)<<8 | 0x11 }

// TMConfig is one run of the tag-matching test.
type TMConfig struct {
	// Local is the softhca device's address (the bridge address, port
	// 4791); softhca is the server and accepts shca-tm on Listener.
	Local    netip.AddrPort
	Listener net.Listener
	Size     int
	Count    int
	MTU      verbs.MTU
	// Log receives one line per message.
	Log io.Writer
}

// RunTM runs softhca's side: a tag-matching SRQ with a tag for each of
// shca-tm's messages, an RC QP on it, and a check of every completion and
// byte (the EAGER data placed by tag; the rendezvous data READ from the
// guest's memory).
func RunTM(ctx context.Context, cfg TMConfig) (res ImmResult, err error) {
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
	buf := make([]byte, size*count)
	pd, err := dev.AllocPD()
	if err != nil {
		return res, err
	}
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	if err != nil {
		return res, err
	}
	cq, err := dev.CreateCQ(4*count+4, nil, nil, 0)
	if err != nil {
		return res, err
	}
	srq, err := pd.CreateSRQ(&hca.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 1, MaxSGE: 1},
		TM: &hca.TMCap{MaxNumTags: uint32(count), MaxOps: uint32(count)}, CQ: cq})
	if err != nil {
		return res, err
	}
	// A tag per message, its buffer slot k; none for anything else, so
	// a message that does not match finds no buffer and the run fails.
	var first, prev *verbs.OpsWR
	for k := range count {
		op := &verbs.OpsWR{WRID: uint64(k), Opcode: verbs.WRTagAdd, TM: verbs.TMOp{Add: verbs.TagAdd{
			RecvWRID: uint64(k), Tag: tmTag(k), Mask: ^uint64(0), SGList: []verbs.SGE{mr.SGE(k*size, size)}}}}
		if prev == nil {
			first = op
		} else {
			prev.Next = op
		}
		prev = op
	}
	if _, err := srq.PostOps(first); err != nil {
		return res, fmt.Errorf("adding the tags: %w", err)
	}
	q, err := pd.CreateQP(&hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, SRQ: srq, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxSendSGE: 1}})
	if err != nil {
		return res, err
	}
	gid, err := dev.QueryGID(1, 1)
	if err != nil {
		return res, err
	}
	var psnb [4]byte
	rand.Read(psnb[:])
	me := immDest{QPN: q.Num(), PSN: binary.BigEndian.Uint32(psnb[:]) & 0xffffff, GID: gid}

	conn, err := acceptCtx(ctx, cfg.Listener)
	if err != nil {
		return res, err
	}
	defer conn.Close()
	stopWatch := context.AfterFunc(ctx, func() { conn.Close() })
	defer stopWatch()
	line := make([]byte, immLine)
	if _, err := io.ReadFull(conn, line); err != nil {
		return res, fmt.Errorf("reading shca-tm's connection line: %w", err)
	}
	peer, err := parseImmDest(line)
	if err != nil {
		return res, err
	}
	// Four READs at once each way (shca-tm's max_dest_rd_atomic).
	if err := q.Connect(hca.Remote{QPN: peer.QPN, PSN: peer.PSN, GID: peer.GID},
		&hca.ConnectOptions{PathMTU: cfg.MTU, PSN: me.PSN, MaxRdAtomic: 4, MaxDestRdAtomic: 4}); err != nil {
		return res, err
	}
	if _, err := conn.Write(me.marshal()); err != nil {
		return res, err
	}
	one := make([]byte, 1)
	if _, err := io.ReadFull(conn, one); err != nil {
		return res, fmt.Errorf("waiting for shca-tm's go: %w", err)
	}

	var problems []string
	matched := make([]bool, count)
	done := 0
	deadline := time.Now().Add(60 * time.Second)
	wcs := make([]verbs.WC, 8)
	for done < count {
		n := cq.Poll(wcs)
		if n == 0 {
			if time.Now().After(deadline) || ctx.Err() != nil {
				return res, fmt.Errorf("softhca: %d of %d tagged messages arrived before the deadline", done, count)
			}
			time.Sleep(50 * time.Microsecond)
			continue
		}
		for _, wc := range wcs[:n] {
			k := int(wc.WRID)
			if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCTMRecv || k >= count {
				return res, fmt.Errorf("softhca: completion wr_id %d: status %v, opcode %v (a tag's TM_RECV expected)",
					wc.WRID, wc.Status, wc.Opcode)
			}
			rndv := k%2 == 1
			var why []string
			if wc.TMInfo != (verbs.TMInfo{Tag: tmTag(k), Priv: uint32(k)}) {
				why = append(why, fmt.Sprintf("tm_info %+v, want tag %#x app_ctx %d", wc.TMInfo, tmTag(k), k))
			}
			if wc.ByteLen != uint32(size) {
				why = append(why, fmt.Sprintf("byte_len %d, want %d", wc.ByteLen, size))
			}
			switch {
			case rndv && !matched[k]:
				// The first of a rendezvous' two completions.
				matched[k] = true
				if wc.WCFlags != verbs.WCFlagTMMatch {
					why = append(why, fmt.Sprintf("flags %#x, want MATCH", uint32(wc.WCFlags)))
				}
				if len(why) > 0 {
					problems = append(problems, fmt.Sprintf("message %d: %s", k, strings.Join(why, "; ")))
				}
				continue
			case rndv:
				if wc.WCFlags != verbs.WCFlagTMDataValid {
					why = append(why, fmt.Sprintf("flags %#x, want DATA_VALID", uint32(wc.WCFlags)))
				}
			default:
				if wc.WCFlags != verbs.WCFlagTMMatch|verbs.WCFlagTMDataValid {
					why = append(why, fmt.Sprintf("flags %#x, want MATCH|DATA_VALID", uint32(wc.WCFlags)))
				}
			}
			for i, b := range buf[k*size : (k+1)*size] {
				if w := tmPattern(k, i); b != w {
					why = append(why, fmt.Sprintf("data byte %d is 0x%02x, want 0x%02x", i, b, w))
					break
				}
			}
			done++
			kind := "EAGER"
			if rndv {
				kind = "RNDV"
			}
			status := "ok"
			if len(why) > 0 {
				status = "BAD: " + strings.Join(why, "; ")
				problems = append(problems, fmt.Sprintf("message %d: %s", k, strings.Join(why, "; ")))
			}
			fmt.Fprintf(logw, "tag %d %s tag=%#x len=%d %s\n", k, kind, wc.TMInfo.Tag, wc.ByteLen, status)
		}
	}
	if _, err := conn.Write([]byte{'d'}); err != nil {
		return res, err
	}
	if _, err := io.ReadFull(conn, one); err != nil {
		return res, fmt.Errorf("waiting for shca-tm's done: %w", err)
	}
	if len(problems) > 0 {
		return res, fmt.Errorf("softhca found %d problems: %s", len(problems), strings.Join(problems, "; "))
	}
	return res, nil
}
