package interop

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// RXEDevice is the name the harness gives the guest's rxe device.
const RXEDevice = "rxe0"

// rxeSetup loads rdma_rxe, adds rxe0 on eth0 and prints the index of the
// RoCEv2 GID holding eth0's IPv4 address once it appears. It calls kmod's
// modprobe by path: Debian's busybox sh would run its own applet.
const rxeSetup = `set -e
/sbin/modprobe rdma_rxe
/sbin/modprobe ib_uverbs
/sbin/modprobe rdma_ucm
[ -e /sys/class/infiniband/rxe0 ] || rdma link add rxe0 type rxe netdev eth0
P=/sys/class/infiniband/rxe0/ports/1
want=$(ip -4 -o addr show dev eth0 | awk '{split($4, a, "/"); print a[1]}')
for try in $(seq 250); do
	for n in 0 1 2 3 4 5 6 7; do
		g=$(cat $P/gids/$n 2>/dev/null) || continue
		t=$(cat $P/gid_attrs/types/$n 2>/dev/null) || continue
		case "$g" in 0000:0000:0000:0000:0000:ffff:*) ;; *) continue ;; esac
		[ "$t" = "RoCE v2" ] || continue
		echo "gid_index=$n gid=$g addr=$want"
		exit 0
	done
	sleep 0.02
done
echo "no RoCEv2 IPv4 GID on rxe0 after 5 s" >&2
exit 1
`

// SetupRXE creates the guest's rxe0 device on eth0 (if it does not exist
// yet) and returns the GID index of its RoCEv2 IPv4 GID.
func (v *VM) SetupRXE(ctx context.Context) (int, error) {
	r, err := v.Sh(ctx, 60*time.Second, rxeSetup)
	if err != nil {
		return 0, fmt.Errorf("setting up rxe0 in the guest: %w", err)
	}
	for _, f := range strings.Fields(string(r.Stdout)) {
		if v, ok := strings.CutPrefix(f, "gid_index="); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("setting up rxe0: no gid_index in %q", r.Stdout)
}

// SetGuestMTU sets the guest's eth0 MTU (rxe's active MTU follows it:
// MTU minus 80 bytes, rounded down to an InfiniBand MTU) and waits until
// rxe0's port reports active_mtu want (256..4096), if want is not 0.
func (v *VM) SetGuestMTU(ctx context.Context, mtu, want int) error {
	script := fmt.Sprintf(`ip link set eth0 mtu %d
[ %d = 0 ] && exit 0
for try in $(seq 250); do
	ibv_devinfo -d rxe0 | grep -q "active_mtu:.*%d (" && exit 0
	sleep 0.02
done
ibv_devinfo -d rxe0 >&2
exit 1`, mtu, want, want)
	if _, err := v.Sh(ctx, 30*time.Second, script); err != nil {
		return fmt.Errorf("guest eth0 MTU %d (rxe0 active_mtu %d): %w", mtu, want, err)
	}
	return nil
}
