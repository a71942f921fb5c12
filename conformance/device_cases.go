package conformance

import (
	"syscall"

	"github.com/softhca/softhca/verbs"
)

func init() {
	Register(
		Case{
			Name:  "query_device/one-port",
			Cite:  `ibv_query_device(3): phys_port_cnt is the "number of physical ports"; ibv_query_port(3) numbers ports from 1`,
			Label: Spec,
			Run: func(t *T, d Device) {
				a := d.QueryDevice()
				if a.PhysPortCnt < 1 {
					t.Fatalf("phys_port_cnt %d", a.PhysPortCnt)
				}
				_, err := d.QueryPort(a.PhysPortCnt + 1)
				ExpectErrno(t, err, syscall.EINVAL, "query_port past the last port")
				_, err = d.QueryPort(0)
				ExpectErrno(t, err, syscall.EINVAL, "query_port 0")
				p, err := d.QueryPort(1)
				ExpectOK(t, err, "query_port 1")
				if !p.ActiveMTU.Valid() || p.ActiveMTU > p.MaxMTU {
					t.Fatalf("active_mtu %s, max_mtu %s", p.ActiveMTU, p.MaxMTU)
				}
				Expect(t, p.State, verbs.PortActive, "port state")
			},
		},
	)
}
