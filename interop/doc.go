// Package interop is softhca's interoperability harness: it boots Linux
// soft-RoCE (rdma_rxe) in a qemu guest attached to a host bridge and runs
// rdma-core's and perftest's tools in the guest against softhca on the
// host, in both directions, checking that the data arrived intact and that
// each side accepted the other's packets (their ICRC verified).
//
// The package is a small library: the guest image builder (image.go), the
// host network and the VM (net.go, vm.go, rxe.go), the guest command
// channel (package interop/agent), packet capture (capture.go) and the
// checks on what it saw (payload.go, perfcheck.go), packet loss (bpf.go),
// rxe's counters (counters.go) and the host side of the immediate-data
// test (imm.go). Most cases run softhca on a UDP socket on the bridge's
// address; the tap group runs it as a host of its own on a TAP on the
// bridge (Net.HostTap, softhca pingpong and perf with --tap).
// The matrix itself is in the test files, behind the build tag interop:
//
//	go test -tags interop ./interop/...      # needs root, qemu, /dev/net/tun
//
// and go run ./interop/cmd/vm up|exec|sh|status|down keeps a guest running
// for trying tools by hand. See README.md in this directory.
package interop
