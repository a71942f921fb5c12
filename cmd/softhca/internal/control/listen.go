package control

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// ErrInUse is wrapped by Listen when a daemon already answers on the
// socket.
var ErrInUse = errors.New("a softhca daemon already serves this control socket")

// Listen creates the control socket at path, readable and writable by
// its owner only (mode 0600, in a directory it creates with mode 0700),
// so that only the user who runs the daemon reaches it. A socket left
// behind by a daemon that died is replaced; one a live daemon answers on
// is not (ErrInUse). Closing the listener removes the socket.
func Listen(path string) (*net.UnixListener, error) {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("control socket directory: %w", err)
		}
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("control socket %s: the path exists and is not a socket: %w", path, syscall.EEXIST)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: %w", path, ErrInUse)
		}
		// Nobody answers: a stale socket.
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("control socket %s: removing a stale socket: %w", path, err)
		}
	}
	// The socket is created with the process's umask; a restrictive one
	// for the bind leaves no moment at which others may connect.
	old := syscall.Umask(0o177)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	l.SetUnlinkOnClose(true)
	return l, nil
}
