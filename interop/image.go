package interop

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// The guest's /init and the test programs built into the image: shca-imm
// (immediate data) and shca-tm (tag-matching messages), with the header
// they share.
var (
	//go:embed guest/init
	guestInit []byte
	//go:embed guest/imm.c
	guestImmC []byte
	//go:embed guest/tm.c
	guestTMC []byte
	//go:embed guest/shca.h
	guestShcaH []byte
)

// guestPrograms are the guest's C programs: name in /usr/bin, source.
var guestPrograms = []struct {
	name string
	src  *[]byte
	file string
}{
	{"shca-imm", &guestImmC, "imm.c"},
	{"shca-tm", &guestTMC, "tm.c"},
}

// imageFormat changes whenever the image builder changes what it puts in
// an image, so that cached images built by an older builder are not used.
const imageFormat = "softhca-interop-image-1"

// GuestPackages are the Debian packages the guest is made of (with their
// dependency closure): rdma-core's ibverbs-utils and the rxe provider,
// perftest, iproute2 (ip, rdma, tc), kmod (modprobe), coreutils (stdbuf,
// so that a killed tool's last lines are not lost in its stdio buffer) and
// busybox for everything else.
var GuestPackages = []string{
	"bash", "busybox-static", "coreutils", "ibverbs-providers", "ibverbs-utils", "iproute2",
	"kmod", "libibverbs1", "librdmacm1", "perftest",
}

// KernelPackage is the Debian metapackage naming the guest kernel.
const KernelPackage = "linux-image-amd64"

// GuestModules are the kernel modules copied into the image, with the
// modules they depend on: virtio network and 9p for the VM, rdma_rxe and
// the verbs user interface, crc32 for rxe's ICRC, and the tc ingress/clsact
// qdisc and BPF classifier for dropping packets inside the guest.
var GuestModules = []string{
	"virtio_pci", "virtio_net", "9p", "9pnet_virtio",
	"rdma_rxe", "ib_uverbs", "rdma_ucm", "crc32_generic", "crc32-pclmul",
	"sch_ingress", "cls_bpf",
}

// ImageConfig says where to build the guest image.
type ImageConfig struct {
	// CacheDir holds downloaded packages and built images (DefaultCacheDir
	// if empty).
	CacheDir string
	// Rebuild builds the image even when a cached one matches.
	Rebuild bool
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// Image is a built guest: a kernel and an initramfs.
type Image struct {
	// Dir is the image's directory in the cache; Kernel and Initrd are in it.
	Dir, Kernel, Initrd string
	// KernelVersion is the guest kernel's release (uname -r).
	KernelVersion string
	// Key identifies the image's inputs (package versions, modules, the
	// guest programs, the builder).
	Key string
	// Debs are the package files the image was made of.
	Debs []string
	// Cached reports that the image came from the cache; BuildTime is how
	// long finding or building it took.
	Cached    bool
	BuildTime time.Duration
}

// DefaultCacheDir is $SOFTHCA_INTEROP_CACHE, else $XDG_CACHE_HOME or
// ~/.cache, then softhca-interop.
func DefaultCacheDir() string {
	if d := os.Getenv("SOFTHCA_INTEROP_CACHE"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "softhca-interop")
}

// HostPackages are the Debian packages the harness needs on the host:
// qemu, kmod (depmod and modprobe for the module closure), gcc and
// libibverbs-dev (the guest's shca-imm), iproute2 (ip, tc). apt, dpkg
// and ldconfig are in every Debian system.
var HostPackages = []string{"qemu-system-x86", "kmod", "gcc", "libc6-dev", "libibverbs-dev", "iproute2"}

// imageTools are the host programs the image builder runs, with the
// Debian packages that provide them.
var imageTools = []struct{ prog, pkg string }{
	{"apt-get", "apt"}, {"apt-cache", "apt"}, {"dpkg", "dpkg"},
	{"depmod", "kmod"}, {"modprobe", "kmod"}, {"ldconfig", "libc-bin"},
	{"gcc", "gcc libc6-dev"},
}

// MissingImageTools lists what the image builder needs and the host lacks,
// as "program (package)".
func MissingImageTools() []string {
	var miss []string
	for _, t := range imageTools {
		if _, err := lookPath(t.prog); err != nil {
			miss = append(miss, t.prog+" ("+t.pkg+")")
		}
	}
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		miss = append(miss, "/usr/include/infiniband/verbs.h (libibverbs-dev)")
	}
	return miss
}

// lookPath is exec.LookPath that also searches the sbin directories,
// which a non-login root shell may lack in PATH.
func lookPath(prog string) (string, error) {
	if p, err := exec.LookPath(prog); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := filepath.Join(d, prog)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in PATH or the sbin directories", prog)
}

// BuildImage returns the guest image for the packages apt currently
// offers, building it when the cache has none for exactly those versions.
func BuildImage(ctx context.Context, cfg ImageConfig) (*Image, error) {
	start := time.Now()
	if cfg.CacheDir == "" {
		cfg.CacheDir = DefaultCacheDir()
	}
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	logf := func(format string, args ...any) { fmt.Fprintf(logw, "image: "+format+"\n", args...) }
	if miss := MissingImageTools(); len(miss) > 0 {
		return nil, fmt.Errorf("building the guest image needs: %s", strings.Join(miss, ", "))
	}
	if err := os.MkdirAll(filepath.Join(cfg.CacheDir, "debs"), 0o755); err != nil {
		return nil, err
	}
	unlock, err := lockFile(ctx, filepath.Join(cfg.CacheDir, ".lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()

	kpkg, err := kernelPackage(ctx)
	if err != nil {
		return nil, err
	}
	names, err := packageClosure(ctx, GuestPackages)
	if err != nil {
		return nil, err
	}
	debs, err := resolveDebs(ctx, append(names, kpkg))
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	fmt.Fprintln(h, imageFormat)
	for _, d := range debs {
		fmt.Fprintln(h, d.file, d.sha256)
	}
	fmt.Fprintln(h, strings.Join(GuestModules, " "))
	h.Write(guestInit)
	h.Write(guestShcaH)
	for _, p := range guestPrograms {
		h.Write(*p.src)
	}
	key := hex.EncodeToString(h.Sum(nil))[:16]
	img := &Image{
		Dir: filepath.Join(cfg.CacheDir, "image-"+key),
		Key: key,
	}
	img.Kernel = filepath.Join(img.Dir, "vmlinuz")
	img.Initrd = filepath.Join(img.Dir, "initrd.cpio")
	for _, d := range debs {
		img.Debs = append(img.Debs, d.file)
	}
	if !cfg.Rebuild {
		if kv, err := os.ReadFile(filepath.Join(img.Dir, "kernel-version")); err == nil {
			img.KernelVersion = strings.TrimSpace(string(kv))
			img.Cached = true
			img.BuildTime = time.Since(start)
			logf("cached %s (kernel %s, %d packages)", img.Dir, img.KernelVersion, len(debs))
			return img, nil
		}
	}

	debDir := filepath.Join(cfg.CacheDir, "debs")
	var missing []string
	for _, d := range debs {
		if _, err := os.Stat(filepath.Join(debDir, d.file)); err != nil {
			missing = append(missing, d.name+"="+d.version)
		}
	}
	if len(missing) > 0 {
		logf("downloading %d of %d packages", len(missing), len(debs))
		if out, err := command(ctx, debDir, "apt-get", append([]string{"download", "-q"}, missing...)...); err != nil {
			return nil, fmt.Errorf("apt-get download (run apt-get update if the package lists are stale): %w\n%s", err, out)
		}
	}
	t1 := time.Now()
	tmp := img.Dir + ".tmp"
	os.RemoveAll(tmp)
	defer os.RemoveAll(tmp)
	if err := assemble(ctx, tmp, debDir, debs, kpkg, logf); err != nil {
		return nil, err
	}
	kv, err := os.ReadFile(filepath.Join(tmp, "kernel-version"))
	if err != nil {
		return nil, err
	}
	img.KernelVersion = strings.TrimSpace(string(kv))
	os.RemoveAll(img.Dir)
	if err := os.Rename(tmp, img.Dir); err != nil {
		return nil, err
	}
	img.BuildTime = time.Since(start)
	pruneCache(cfg.CacheDir, img, debs, logf)
	fi, _ := os.Stat(img.Initrd)
	logf("built %s in %v (assembly %v): kernel %s, %d packages, initramfs %d MB",
		img.Dir, img.BuildTime.Round(time.Millisecond), time.Since(t1).Round(time.Millisecond),
		img.KernelVersion, len(debs), fi.Size()>>20)
	return img, nil
}

// pruneCache removes, after a new image was built, the other images and
// the package files the new image does not use: the cache keeps one image
// (qemu reads the initramfs when it starts, so a running guest does not
// need its files).
func pruneCache(dir string, img *Image, debs []deb, logf func(string, ...any)) {
	keep := map[string]bool{}
	for _, d := range debs {
		keep[d.file] = true
	}
	var removed int
	if ents, err := os.ReadDir(filepath.Join(dir, "debs")); err == nil {
		for _, e := range ents {
			if !keep[e.Name()] && strings.HasSuffix(e.Name(), ".deb") {
				if os.Remove(filepath.Join(dir, "debs", e.Name())) == nil {
					removed++
				}
			}
		}
	}
	if ents, err := os.ReadDir(dir); err == nil {
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			if e.IsDir() && strings.HasPrefix(e.Name(), "image-") && p != img.Dir {
				if os.RemoveAll(p) == nil {
					removed++
				}
			}
		}
	}
	if removed > 0 {
		logf("removed %d outdated files and images from %s", removed, dir)
	}
}

// deb is one package file as apt would download it.
type deb struct{ name, version, file, sha256 string }

// kernelPackage resolves the kernel metapackage to the versioned kernel
// image package it depends on (linux-image-6.1.0-NN-amd64).
func kernelPackage(ctx context.Context) (string, error) {
	out, err := command(ctx, "", "apt-cache", "depends", KernelPackage)
	if err != nil {
		return "", fmt.Errorf("apt-cache depends %s: %w\n%s", KernelPackage, err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && f[0] == "Depends:" && strings.HasPrefix(f[1], "linux-image-") {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("apt-cache depends %s names no linux-image package:\n%s", KernelPackage, out)
}

// packageClosure returns the packages pkgs need, recursively, without
// recommends and suggests (apt-cache depends --recurse).
func packageClosure(ctx context.Context, pkgs []string) ([]string, error) {
	args := []string{"depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
		"--no-breaks", "--no-replaces", "--no-enhances"}
	out, err := command(ctx, "", "apt-cache", append(args, pkgs...)...)
	if err != nil {
		return nil, fmt.Errorf("apt-cache depends: %w\n%s", err, out)
	}
	set := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		// Package lines start in column 0; virtual packages are <name>;
		// foreign-architecture ones carry :arch.
		if l == "" || l[0] == ' ' || l[0] == '<' || strings.Contains(l, ":") {
			continue
		}
		set[strings.TrimSpace(l)] = true
	}
	var names []string
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) < len(pkgs) {
		return nil, fmt.Errorf("apt-cache depends found only %v for %v", names, pkgs)
	}
	return names, nil
}

// resolveDebs asks apt which file it would download for each package.
func resolveDebs(ctx context.Context, names []string) ([]deb, error) {
	out, err := command(ctx, "", "apt-get", append([]string{"download", "--print-uris"}, names...)...)
	if err != nil {
		return nil, fmt.Errorf("apt-get download --print-uris (run apt-get update if the package lists are stale): %w\n%s", err, out)
	}
	var debs []deb
	for _, l := range strings.Split(string(out), "\n") {
		// 'URI' file size SHA256:hex
		f := strings.Fields(l)
		if len(f) < 4 || !strings.HasPrefix(f[0], "'") {
			continue
		}
		file := f[1]
		parts := strings.Split(strings.TrimSuffix(file, ".deb"), "_")
		if len(parts) != 3 {
			return nil, fmt.Errorf("unexpected package file name %q", file)
		}
		ver, err := url.PathUnescape(parts[1])
		if err != nil {
			return nil, err
		}
		debs = append(debs, deb{name: parts[0], version: ver, file: file, sha256: f[3]})
	}
	if len(debs) != len(names) {
		return nil, fmt.Errorf("apt-get download --print-uris listed %d files for %d packages:\n%s", len(debs), len(names), out)
	}
	sort.Slice(debs, func(i, j int) bool { return debs[i].file < debs[j].file })
	return debs, nil
}

// assemble builds the image in dir.
func assemble(ctx context.Context, dir, debDir string, debs []deb, kpkg string, logf func(string, ...any)) error {
	root := filepath.Join(dir, "root")
	kdir := filepath.Join(dir, "kernel")
	for _, d := range []string{root, kdir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// Unpack without maintainer scripts: the guest needs files, not
	// configuration.
	for _, d := range debs {
		dst := root
		if d.name == kpkg {
			dst = kdir
		}
		if out, err := command(ctx, "", "dpkg", "-x", filepath.Join(debDir, d.file), dst); err != nil {
			return fmt.Errorf("dpkg -x %s: %w\n%s", d.file, err, out)
		}
	}
	for _, p := range []string{"usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale",
		"usr/share/lintian", "usr/share/bash-completion", "usr/share/zsh"} {
		os.RemoveAll(filepath.Join(root, p))
	}

	// The kernel and the module closure.
	ents, err := os.ReadDir(filepath.Join(kdir, "lib/modules"))
	if err != nil {
		return fmt.Errorf("kernel package %s: %w", kpkg, err)
	}
	if len(ents) != 1 {
		return fmt.Errorf("kernel package %s: want one lib/modules/<version>, got %v", kpkg, ents)
	}
	kv := ents[0].Name()
	if err := copyFile(filepath.Join(kdir, "boot", "vmlinuz-"+kv), filepath.Join(dir, "vmlinuz"), 0o644); err != nil {
		return err
	}
	if out, err := command(ctx, "", "depmod", "-b", kdir, kv); err != nil {
		return fmt.Errorf("depmod: %w\n%s", err, out)
	}
	mods := map[string]bool{}
	for _, m := range GuestModules {
		out, err := command(ctx, "", "modprobe", "-d", kdir, "-S", kv, "--show-depends", m)
		if err != nil {
			return fmt.Errorf("modprobe --show-depends %s: %w\n%s", m, err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "insmod" {
				mods[f[1]] = true
			}
		}
	}
	for m := range mods {
		rel, err := filepath.Rel(kdir, m)
		if err != nil || strings.HasPrefix(rel, "..") {
			return fmt.Errorf("module %s is outside the kernel tree", m)
		}
		if err := copyFile(m, filepath.Join(root, rel), 0o644); err != nil {
			return err
		}
	}
	for _, f := range []string{"modules.order", "modules.builtin", "modules.builtin.modinfo"} {
		src := filepath.Join(kdir, "lib/modules", kv, f)
		if _, err := os.Stat(src); err == nil {
			if err := copyFile(src, filepath.Join(root, "lib/modules", kv, f), 0o644); err != nil {
				return err
			}
		}
	}
	if out, err := command(ctx, "", "depmod", "-b", root, kv); err != nil {
		return fmt.Errorf("depmod (guest): %w\n%s", err, out)
	}
	logf("kernel %s, %d modules", kv, len(mods))

	// busybox for every command no package provides (its static binary
	// runs on the host to list its applets).
	out, err := command(ctx, "", filepath.Join(root, "bin/busybox"), "--list-full")
	if err != nil {
		return fmt.Errorf("busybox --list-full: %w\n%s", err, out)
	}
	for _, a := range strings.Fields(string(out)) {
		p := filepath.Join(root, a)
		if _, err := os.Lstat(p); err == nil {
			continue
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.Symlink("/bin/busybox", p); err != nil {
			return err
		}
	}
	for _, d := range []string{"proc", "sys", "dev", "tmp", "run", "root", "host", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	files := map[string]string{
		"etc/passwd":   "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":    "root:x:0:\n",
		"etc/hostname": "shca-guest\n",
		"etc/hosts":    "127.0.0.1 localhost shca-guest\n",
	}
	for p, s := range files {
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(root, "init"), guestInit, 0o755); err != nil {
		return err
	}
	// The test programs, built against the host's libibverbs (the same
	// Debian release as the guest's).
	if err := os.WriteFile(filepath.Join(dir, "shca.h"), guestShcaH, 0o644); err != nil {
		return err
	}
	for _, p := range guestPrograms {
		src := filepath.Join(dir, p.file)
		if err := os.WriteFile(src, *p.src, 0o644); err != nil {
			return err
		}
		if out, err := command(ctx, "", "gcc", "-O2", "-Wall", "-Werror", "-o", filepath.Join(root, "usr/bin", p.name), src, "-libverbs"); err != nil {
			return fmt.Errorf("gcc %s: %w\n%s", p.name, err, out)
		}
	}
	if out, err := command(ctx, "", "ldconfig", "-r", root); err != nil {
		return fmt.Errorf("ldconfig -r: %w\n%s", err, out)
	}
	f, err := os.Create(filepath.Join(dir, "initrd.cpio"))
	if err != nil {
		return err
	}
	if err := writeCpio(f, root); err != nil {
		f.Close()
		return fmt.Errorf("writing the initramfs: %w", err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	manifest, _ := json.MarshalIndent(map[string]any{"kernel": kv, "debs": debs, "modules": GuestModules}, "", "  ")
	os.WriteFile(filepath.Join(dir, "manifest.json"), manifest, 0o644)
	os.RemoveAll(root)
	os.RemoveAll(kdir)
	return os.WriteFile(filepath.Join(dir, "kernel-version"), []byte(kv+"\n"), 0o644)
}

// MarshalJSON lets the manifest list the packages.
func (d deb) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]string{"name": d.name, "version": d.version, "file": d.file})
}

func copyFile(src, dst string, perm os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, perm)
}

// command runs a host program (found with lookPath) and returns its
// combined output.
func command(ctx context.Context, dir, prog string, args ...string) ([]byte, error) {
	p, err := lookPath(prog)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, p, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C")
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	err = cmd.Run()
	return buf.Bytes(), err
}

// lockFile takes an exclusive flock on path, waiting until ctx is done.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for lock %s (another harness run holds it): %w", path, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// scanLines calls fn for each line of b.
func scanLines(b []byte, fn func(string)) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fn(sc.Text())
	}
}
