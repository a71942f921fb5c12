// Package hca is softhca's device: the object a program opens instead of
// an rdma-core device. It owns the protection domains, memory regions,
// completion queues and channels, shared receive queues, queue pairs and
// address handles, hands out QP numbers, answers query_device, query_port
// and query_gid with attributes modelled on Linux rxe, and delivers
// asynchronous events.
//
// The objects behave as the libibverbs man pages say, error for error: a
// verb that fails returns an error wrapping the errno libibverbs would
// return (errors.Is(err, syscall.EINVAL)) and changes nothing.
//
//	dev, _ := hca.Open(hca.Config{Addrs: []netip.Addr{addr}})
//	pd, _ := dev.AllocPD()
//	mr, _ := pd.RegMR(buf, verbs.AccessLocalWrite)
//	cq, _ := dev.CreateCQ(16, nil, nil, 0)
//	qp, _ := pd.CreateQP(&hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, ...})
//
// # Ownership and threading
//
// Every method is safe for concurrent use. Creating and destroying objects
// serialises on the device's mutex (dev.mu), which also guards the QP
// number table and object counts; the data-path verbs (post, poll, notify)
// take only their own object's lock. Lock order: Device.mu, then a QP's,
// then a CQ's or SRQ's, then the asynchronous event queue's.
package hca
