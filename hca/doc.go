// Package hca is softhca's device: the object a program opens instead of
// an rdma-core device. It owns the protection domains, memory regions,
// completion queues and channels, shared receive queues, queue pairs and
// address handles, hands out QP numbers, answers query_device, query_port
// and query_gid with attributes modelled on Linux rxe, and delivers
// asynchronous events.
//
// The objects behave as the libibverbs man pages say, error for error: a
// verb that fails returns an error wrapping the errno libibverbs would
// return (errors.Is(err, syscall.EINVAL)) and changes nothing. A program
// names the types of this package, of package verbs (attributes, work
// requests, completions) and of the link it opens (link/udp), nothing of
// the engine below.
//
// # A program
//
// A device moves packets over a link, usually a UDP socket (link/udp);
// Config.Link gives it, and the device owns it from then on. Then, as with
// libibverbs: a protection domain, memory registered in it, a completion
// queue, a queue pair; Connect walks the QP through INIT, RTR and RTS
// towards its peer; PostRecv and PostSend queue work; PollWait (or Poll,
// or ReqNotify and a CompChannel) takes the completions:
//
//	dev, _ := hca.Open(hca.Config{Link: lnk})    // lnk: a *udp.Link bound to this host's address
//	pd, _ := dev.AllocPD()
//	mr, _ := pd.RegMR(buf, verbs.AccessLocalWrite)
//	cq, _ := dev.CreateCQ(16, nil, nil, 0)
//	qp, _ := pd.CreateQP(&hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeRC,
//		Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
//	_ = qp.Connect(hca.Remote{QPN: peerQPN, PSN: peerPSN, GID: peerGID}, nil)
//	_, _ = qp.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
//		SGList: []verbs.SGE{mr.SGE(0, 64)}})
//	n, err := cq.PollWait(ctx, wcs)
//
// The package's Example is a complete program of this kind, two devices
// on one machine, checked by go test.
//
// # Ownership and threading
//
// Every method is safe for concurrent use. Creating and destroying objects
// serialises on the device's mutex (dev.mu), which also guards the QP
// number table and object counts; the data-path verbs (post, poll, notify)
// take only their own object's lock. Lock order: Device.mu, then a QP's,
// then a CQ's or SRQ's, then the asynchronous event queue's.
package hca
