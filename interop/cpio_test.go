package interop

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

type cpioEntry struct {
	mode uint32
	data string
}

// readCpio parses a newc archive (as the kernel does) into name -> entry.
func readCpio(t *testing.T, b []byte) map[string]cpioEntry {
	t.Helper()
	out := map[string]cpioEntry{}
	field := func(h []byte, i int) int {
		v, err := strconv.ParseUint(string(h[6+8*i:6+8*i+8]), 16, 32)
		if err != nil {
			t.Fatalf("bad header field %d: %v", i, err)
		}
		return int(v)
	}
	pad := func(n int) int { return (n + 3) &^ 3 }
	for off := 0; ; {
		h := b[off : off+110]
		if string(h[:6]) != "070701" {
			t.Fatalf("offset %d: magic %q, want 070701", off, h[:6])
		}
		mode, size, namesize := field(h, 1), field(h, 6), field(h, 11)
		name := string(b[off+110 : off+110+namesize-1])
		off = pad(off + 110 + namesize)
		if name == "TRAILER!!!" {
			if rest := b[off:]; len(bytes.Trim(rest, "\x00")) != 0 {
				t.Errorf("%d bytes after the trailer are not padding", len(rest))
			}
			return out
		}
		out[name] = cpioEntry{uint32(mode), string(b[off : off+size])}
		off = pad(off + size)
	}
}

func TestWriteCpio(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755))
	must(os.WriteFile(filepath.Join(root, "init"), []byte("#!/bin/sh\n"), 0o755))
	must(os.WriteFile(filepath.Join(root, "usr/bin/odd"), []byte("12345"), 0o640))
	must(os.WriteFile(filepath.Join(root, "empty"), nil, 0o600))
	must(os.Symlink("/bin/busybox", filepath.Join(root, "usr/bin/sh")))

	var buf bytes.Buffer
	must(writeCpio(&buf, root))
	got := readCpio(t, buf.Bytes())
	want := map[string]cpioEntry{
		"init":        {0o100755, "#!/bin/sh\n"},
		"usr":         {0o040755, ""},
		"usr/bin":     {0o040755, ""},
		"usr/bin/odd": {0o100640, "12345"},
		"usr/bin/sh":  {0o120777, "/bin/busybox"},
		"empty":       {0o100600, ""},
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s missing from the archive", name)
			continue
		}
		if g != w {
			t.Errorf("%s: mode %o data %q, want mode %o data %q", name, g.mode, g.data, w.mode, w.data)
		}
	}
	if len(got) != len(want) {
		t.Errorf("archive has %d entries, want %d: %v", len(got), len(want), got)
	}
}
