// Command vm keeps an interop guest (Linux rdma_rxe in qemu, on a host
// bridge) running so that tools can be tried against it by hand.
//
//	go run ./interop/cmd/vm up            # build/find the image, boot, set up rxe0
//	go run ./interop/cmd/vm exec -- ibv_devinfo -d rxe0
//	go run ./interop/cmd/vm exec -t 60s -- ibv_rc_pingpong -d rxe0 -g 1
//	go run ./interop/cmd/vm status
//	go run ./interop/cmd/vm down
//
// Run as root. By default it uses slot 1: bridge shbr1 with the host at
// 10.77.1.1, tap shtap1, the guest at 10.77.1.2 (the interop tests use
// slot 0, so both can run at once). -slot N picks another. The guest's
// agent stays up after "up" returns; "down" stops qemu and removes the
// bridge and the tap. The host directory <dir>/share is /host in the
// guest.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/softhca/softhca/interop"
	"github.com/softhca/softhca/interop/agent"
)

const usage = `usage: vm <command> [flags]

commands:
  build                 build (or find in the cache) the guest image
  up [-mtu N] [-mem MB] boot a guest and set up rxe0
  exec [-t DUR] -- CMD  run CMD in the guest, stream its output, exit with its status
  sh [-t DUR] SCRIPT    run a bash script in the guest
  status                say whether a guest runs, and where
  down                  stop the guest, remove the bridge and the tap

common flags (after the command): -slot N (default 1), -dir DIR
(default $TMPDIR/softhca-interop-vmN), -cache DIR (image cache)
`

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "help" || args[0] == "--help" {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	cmd := args[0]
	fs := flag.NewFlagSet("vm "+cmd, flag.ContinueOnError)
	slot := fs.Int("slot", 1, "network slot: bridge shbrN, host 10.77.N.1, guest 10.77.N.2")
	dir := fs.String("dir", "", "run directory (default $TMPDIR/softhca-interop-vmN)")
	cache := fs.String("cache", interop.DefaultCacheDir(), "image cache directory")
	mtu := fs.Int("mtu", 9000, "MTU of the bridge, the tap and the guest's eth0")
	mem := fs.Int("mem", 1024, "guest memory in MB")
	accel := fs.String("accel", "tcg", "qemu accelerator: tcg or kvm")
	timeout := fs.Duration("t", 0, "command timeout for exec and sh (0: none)")
	rebuild := fs.Bool("rebuild", false, "build the image even if it is cached")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if *dir == "" {
		*dir = filepath.Join(os.TempDir(), fmt.Sprintf("softhca-interop-vm%d", *slot))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	status := 0
	switch cmd {
	case "build":
		_, err = interop.BuildImage(ctx, interop.ImageConfig{CacheDir: *cache, Rebuild: *rebuild, Log: os.Stderr})
	case "up":
		err = up(ctx, *slot, *dir, *cache, *mtu, *mem, *accel, *rebuild)
	case "exec", "sh":
		rest := fs.Args()
		if len(rest) == 0 {
			fmt.Fprint(os.Stderr, usage)
			return 2
		}
		if cmd == "sh" {
			rest = []string{"bash", "-c", strings.Join(rest, " ")}
		}
		status, err = execute(ctx, *dir, rest, *timeout)
	case "status":
		var v *interop.VM
		v, err = interop.Attach(*dir)
		if err == nil && !v.Running() {
			err = fmt.Errorf("%w (stale state in %s: qemu pid %d is gone; run vm down)", interop.ErrNoVM, *dir, v.PID)
		}
		if err == nil {
			fmt.Printf("guest %s (agent %s), host %s on %s/%s, qemu pid %d, kernel %s, up since %s\n",
				v.Net.Guest.Addr(), v.State.Agent, v.Net.Host.Addr(), v.Net.Bridge, v.Net.Tap, v.PID,
				v.Kernel, v.Started.Format(time.RFC3339))
		}
	case "down":
		err = down(*dir, *slot)
	default:
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "vm:", err)
		if status == 0 {
			status = 1
		}
	}
	return status
}

func up(ctx context.Context, slot int, dir, cache string, mtu, mem int, accel string, rebuild bool) error {
	if v, err := interop.Attach(dir); err == nil && v.Running() {
		return fmt.Errorf("a guest already runs (qemu pid %d, %s): vm down first", v.PID, v.Net.Guest.Addr())
	}
	if os.Geteuid() != 0 {
		return errors.New("must run as root (bridge, tap)")
	}
	var miss []string
	miss = append(miss, interop.MissingImageTools()...)
	miss = append(miss, interop.MissingVMTools()...)
	miss = append(miss, interop.MissingNetTools()...)
	if len(miss) > 0 {
		return fmt.Errorf("missing: %s", strings.Join(miss, ", "))
	}
	img, err := interop.BuildImage(ctx, interop.ImageConfig{CacheDir: cache, Rebuild: rebuild, Log: os.Stderr})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	agentBin, err := interop.BuildAgent(ctx, dir)
	if err != nil {
		return err
	}
	n := interop.Slot(slot)
	n.MTU = mtu
	if err := n.Up(ctx); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "vm: booting (qemu -accel %s), console in %s/console.log\n", accel, dir)
	v, err := interop.StartVM(ctx, interop.VMConfig{Image: img, Net: n, Dir: dir, Agent: agentBin, MemMB: mem, Accel: accel})
	if err != nil {
		n.Down()
		return err
	}
	gidx, err := v.SetupRXE(ctx)
	if err != nil {
		v.Stop()
		n.Down()
		return err
	}
	fmt.Printf(`guest up in %.1f s: kernel %s, rxe0 on eth0 %s (MTU %d), RoCEv2 GID index %d
host: %s on %s (tap %s); qemu pid %d; /host in the guest is %s/share
try:  go run ./interop/cmd/vm exec -slot %d -- ibv_devinfo -d rxe0
      go run ./interop/cmd/vm exec -slot %d -t 60s -- ibv_rc_pingpong -d rxe0 -g %d -s 4096 -n 10
      (then, on the host: softhca pingpong rc -g 1 -s 4096 -n 10 %s)
stop: go run ./interop/cmd/vm down -slot %d
`, v.BootTime.Seconds(), v.Kernel, n.Guest, n.MTU, gidx, n.Host.Addr(), n.Bridge, n.Tap, v.PID, dir,
		slot, slot, gidx, n.Guest.Addr(), slot)
	return nil
}

func execute(ctx context.Context, dir string, argv []string, timeout time.Duration) (int, error) {
	v, err := interop.Attach(dir)
	if err != nil {
		return 1, fmt.Errorf("%w: %w (vm up first)", interop.ErrNoVM, err)
	}
	p, err := v.Agent.Start(ctx, agent.Request{Argv: argv, Timeout: timeout}, os.Stdout, os.Stderr)
	if err != nil {
		return 1, err
	}
	r, err := p.Wait()
	if err != nil {
		return 1, err
	}
	if !r.Exit.OK() {
		if r.Exit.Code > 0 {
			return r.Exit.Code, nil
		}
		return 1, errors.New(r.Exit.String())
	}
	return 0, nil
}

func down(dir string, slot int) error {
	n := interop.Slot(slot)
	if v, err := interop.Attach(dir); err == nil {
		v.Stop()
		n = v.Net
	}
	n.Down()
	os.Remove(filepath.Join(dir, "vm.json"))
	return nil
}
