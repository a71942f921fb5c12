package interop

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// writeCpio writes the tree under root as a "newc" cpio archive (the
// format the kernel unpacks as an initramfs), entries in lexical order,
// owned by root, with paths relative to root. Regular files, directories
// and symbolic links are stored; hard links become separate copies and
// other file types are skipped.
func writeCpio(w io.Writer, root string) error {
	var paths []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	bw := bufio.NewWriterSize(w, 1<<20)
	ino := 1
	for _, p := range paths {
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		var mode uint32
		var data []byte
		var file *os.File
		var size int64
		switch {
		case fi.Mode().IsRegular():
			mode = 0o100000
			size = fi.Size()
			if file, err = os.Open(p); err != nil {
				return err
			}
		case fi.IsDir():
			mode = 0o040000
		case fi.Mode()&fs.ModeSymlink != 0:
			mode = 0o120000
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			data = []byte(t)
			size = int64(len(data))
		default:
			continue
		}
		mode |= uint32(fi.Mode().Perm())
		if fi.Mode()&fs.ModeSetuid != 0 {
			mode |= 0o4000
		}
		if fi.Mode()&fs.ModeSetgid != 0 {
			mode |= 0o2000
		}
		if fi.Mode()&fs.ModeSticky != 0 {
			mode |= 0o1000
		}
		err = cpioHeader(bw, ino, mode, fi.ModTime().Unix(), size, rel)
		if err == nil {
			if file != nil {
				var n int64
				n, err = io.Copy(bw, file)
				file.Close()
				if err == nil && n != size {
					err = fmt.Errorf("cpio: %s changed size while being archived", p)
				}
			} else {
				_, err = bw.Write(data)
			}
		}
		if err != nil {
			return err
		}
		if err := cpioPad(bw, size); err != nil {
			return err
		}
		ino++
	}
	if err := cpioHeader(bw, 0, 0, 0, 0, "TRAILER!!!"); err != nil {
		return err
	}
	return bw.Flush()
}

// cpioHeader writes a newc header and the name, padded to 4 bytes.
func cpioHeader(w io.Writer, ino int, mode uint32, mtime, size int64, name string) error {
	nlink := 1
	if mode&0o170000 == 0o040000 {
		nlink = 2
	}
	// magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor,
	// devminor, rdevmajor, rdevminor, namesize, check
	h := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, mtime, size, 0, 0, 0, 0, len(name)+1, 0)
	if _, err := io.WriteString(w, h+name+"\x00"); err != nil {
		return err
	}
	return cpioPad(w, int64(len(h)+len(name)+1))
}

func cpioPad(w io.Writer, n int64) error {
	if r := n % 4; r != 0 {
		_, err := w.Write(make([]byte, 4-r))
		return err
	}
	return nil
}
