package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/softhca/softhca/cmd/softhca/internal/daemon"
	"github.com/softhca/softhca/cmd/softhca/internal/perftest"
	"github.com/softhca/softhca/cmd/softhca/internal/pingpong"
	"github.com/softhca/softhca/hca"
)

// The responders serve runs for peers: --pingpong ARGS and --perftest
// ARGS take the server's command line of softhca pingpong and softhca
// perf (without a host), and the daemon serves it again and again on its
// own device, one client at a time, as the tool's own server serves one.
// The server's options must match the client's, as with rdma-core's and
// perftest's servers.

// serviceList is a repeatable service flag.
type serviceList struct {
	kind string // "pingpong" or "perftest"
	list *[]daemon.Service
}

func (s serviceList) String() string { return "" }

func (s serviceList) Set(v string) error {
	var svc daemon.Service
	var err error
	if s.kind == "pingpong" {
		svc, err = pingpongService(v)
	} else {
		svc, err = perftestService(v)
	}
	if err != nil {
		return err
	}
	*s.list = append(*s.list, svc)
	return nil
}

// pingpongService makes the responder of a pingpong server's arguments
// ("rc -s 4096 -p 18515").
func pingpongService(v string) (daemon.Service, error) {
	args := strings.Fields(v)
	pa, help, err := parsePingpongArgs(args)
	switch {
	case help:
		return daemon.Service{}, fmt.Errorf("%q: the arguments of softhca pingpong's server, such as \"rc -p 18515\"", v)
	case err != nil:
		return daemon.Service{}, err
	case pa.ServerName != "":
		return daemon.Service{}, fmt.Errorf("%q names a host: a responder is a server (softhca pingpong without a host)", v)
	case pa.pcapFile != "":
		return daemon.Service{}, fmt.Errorf("%q: -w is not for a responder (softhca trace -w captures the daemon's packets)", v)
	case pa.Addr.IsValid() || pa.PeerPort != 0 || pa.PortMTU != 0 || pa.NoGSO:
		return daemon.Service{}, fmt.Errorf("%q: --addr, --peer-port, --port-mtu and --no-gso describe a device of its own; the responder runs on the daemon's (serve's --listen, --peer-port, --mtu)", v)
	}
	cfg := pa.Config
	return daemon.Service{
		Name: "pingpong " + strings.Join(args, " "),
		Addr: fmt.Sprintf(":%d", cfg.Port),
		Run: func(ctx context.Context, dev *hca.Device, ln net.Listener, out io.Writer) error {
			c := cfg
			c.Device, c.Listener = dev, ln
			return pingpong.Run(ctx, c, out)
		},
	}, nil
}

// perftestService makes the responder of a perf server's arguments
// ("write_bw -p 18516").
func perftestService(v string) (daemon.Service, error) {
	args := strings.Fields(v)
	if len(args) == 0 {
		return daemon.Service{}, fmt.Errorf("%q: the arguments of softhca perf's server, such as \"write_bw -p 18516\"", v)
	}
	test, err := perftest.ParseTest(args[0])
	if err != nil {
		return daemon.Service{}, err
	}
	o, err := perftest.ParseArgs(test, args[1:])
	switch {
	case err != nil:
		return daemon.Service{}, err
	case o.Server != "":
		return daemon.Service{}, fmt.Errorf("%q names a host: a responder is a server (softhca perf without a host)", v)
	case o.PcapFile != "" || o.Plot != "":
		return daemon.Service{}, fmt.Errorf("%q: -w and --plot are not for a responder", v)
	case o.Addr.IsValid() || o.PeerPort != 0 || o.NoGSO:
		return daemon.Service{}, fmt.Errorf("%q: --addr, --peer-port and --no-gso describe a device of its own; the responder runs on the daemon's (serve's --listen and --peer-port)", v)
	case o.Port == 0:
		return daemon.Service{}, fmt.Errorf("%q: -p 0: a responder needs a port its clients know", v)
	}
	return daemon.Service{
		Name: "perf " + strings.Join(args, " "),
		Addr: fmt.Sprintf(":%d", o.Port),
		Run: func(ctx context.Context, dev *hca.Device, ln net.Listener, out io.Writer) error {
			oc := *o
			_, err := perftest.Run(ctx, perftest.Config{Options: &oc, Device: dev, Listener: ln, Stdout: out, Stderr: out})
			return err
		},
	}, nil
}

// needsOneWorker reports whether a service shares one buffer among QPs
// (srq_pingpong), which is safe only on a device with one worker.
func needsOneWorker(svcs []daemon.Service) bool {
	for _, s := range svcs {
		if strings.HasPrefix(s.Name, "pingpong srq") {
			return true
		}
	}
	return false
}
