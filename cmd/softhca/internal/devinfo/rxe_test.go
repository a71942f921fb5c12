package devinfo

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/internal/testcaps"
)

// captureAddr is the address of the rxe device in the capture (its
// GID[1]): the device the tests describe has it too.
var captureAddr = netip.MustParseAddr("10.77.0.2")

// openDefault opens a device with the default configuration on
// captureAddr, without a link (no socket), as softhca devinfo describes
// one.
func openDefault(t *testing.T) *hca.Device {
	t.Helper()
	d, err := hca.Open(hca.Config{Addrs: []netip.Addr{captureAddr}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// difference is a field whose value softhca's device has, by design,
// different from rxe's in the capture.
type difference struct {
	key     string // the field's label, as printed ("node_guid:")
	softhca string // softhca's value; continuation lines (flag names) follow, one per line
	reason  string
}

// differences lists every field of ibv_devinfo -v whose value differs
// between rxe0 in the capture and softhca's default device on the same
// address, with why. Every other field must print the same value.
var differences = []difference{
	{"hca_id:", "softhca0", "the device's name"},
	{"node_guid:", "0000:0aff:fe4d:0002", "rxe makes the node GUID from its netdev's MAC (52:54:00:77:00:02); softhca has no netdev and makes it from a locally administered MAC, 02:00 and the IPv4 address (hca.NodeGUIDFor)"},
	{"sys_image_guid:", "0000:0aff:fe4d:0002", "the node GUID, as rxe's is"},
	{"device_cap_flags:", "0x00003c76\nBAD_PKEY_CNTR\nBAD_QKEY_CNTR\nAUTO_PATH_MIG\nCHANGE_PHY_PORT\nUD_AV_PORT_ENFORCE\nPORT_ACTIVE_EVENT\nSYS_IMAGE_GUID\nRC_RNR_NAK_GEN\nSRQ_RESIZE",
		"softhca has no memory windows and no fast registration (IBV_WR_BIND_MW, IBV_WR_LOCAL_INV fail), so not MEM_WINDOW, MEM_MGT_EXTENSIONS, MEM_WINDOW_TYPE_2B"},
	{"max_mw:", "0", "no memory windows"},
	{"device_cap_flags_ex:", "0x3C76", "device_cap_flags in the low 32 bits, as the kernel reports it"},
	{"max_msg_sz:", "0x80000000", "2^31, as current kernels' rxe (the capture's kernel had 8 MiB) and the largest message the verbs allow"},
	{"GID[  0]:", "fe80::aff:fe4d:2, RoCE v2", "the link-local GID holds the node GUID, as rxe's"},
}

// block is a run of lines that softhca prints in place of rxe's, by
// design: devinfo.c prints a different set of fields when a value
// crosses one of its conditions.
type block struct {
	rxe     []string // rxe's keys
	softhca []string // softhca's lines, exactly
	reason  string
}

var blocks = []block{
	{
		rxe: []string{"tag matching not supported"},
		softhca: []string{
			"\tmax_rndv_hdr_size:\t\t64",
			"\tmax_num_tags:\t\t\t1024",
			"\tmax_ops:\t\t\t1024",
			"\tmax_sge:\t\t\t4",
			"\tflags:",
			"\t\t\t\t\tIBV_TM_CAP_RC",
		},
		reason: "softhca does tag matching in software (docs/tag-matching.md); rxe has none, and print_tm_caps prints the limits when max_num_tags is not 0",
	},
}

// field is one printed field: its line, split into layout (tabs and
// label) and value, and its continuation lines (flag names, five tabs
// deep).
type field struct {
	line   int // 1-based
	indent int // leading tabs
	key    string
	sep    string // the tabs after the key
	value  string
	cont   []string // continuation lines, whole
}

func (f field) layout() string { return strings.Repeat("\t", f.indent) + f.key + f.sep }

// fullValue is the value and the continuation lines without their tabs,
// one per line, as difference.softhca has it.
func (f field) fullValue() string {
	v := f.value
	for _, c := range f.cont {
		v += "\n" + strings.TrimLeft(c, "\t")
	}
	return v
}

// parseFields splits ibv_devinfo's output into fields.
func parseFields(t *testing.T, text string) []field {
	t.Helper()
	require.True(t, strings.HasSuffix(text, "\n"), "output ends with a newline")
	var fs []field
	for i, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		rest := strings.TrimLeft(l, "\t")
		indent := len(l) - len(rest)
		if indent == 5 {
			require.NotEmpty(t, fs, "line %d: a continuation line first", i+1)
			fs[len(fs)-1].cont = append(fs[len(fs)-1].cont, l)
			continue
		}
		f := field{line: i + 1, indent: indent, key: rest}
		if k := strings.Index(rest, ":"); k >= 0 {
			f.key = rest[:k+1]
			v := rest[k+1:]
			f.value = strings.TrimLeft(v, "\t")
			f.sep = v[:len(v)-len(f.value)]
		}
		fs = append(fs, f)
	}
	return fs
}

// compareWithRxe compares softhca's ibv_devinfo -v text with rxe's field
// by field: the same keys in the same order with the same layout, and
// the same values except the differences and blocks listed. It returns
// one message per mismatch.
func compareWithRxe(t *testing.T, rxeText, softText string) []string {
	t.Helper()
	rxe, soft := parseFields(t, rxeText), parseFields(t, softText)
	diffs := map[string]difference{}
	for _, d := range differences {
		diffs[d.key] = d
	}
	used := map[string]bool{}
	var errs []string
	i, j := 0, 0
	for i < len(rxe) && j < len(soft) {
		r, s := rxe[i], soft[j]
		if r.key == s.key && r.indent == s.indent {
			if r.layout() != s.layout() {
				errs = append(errs, fmt.Sprintf("line %d: %q: layout %q, rxe's (line %d) %q", s.line, s.key, s.layout(), r.line, r.layout()))
			}
			if d, ok := diffs[s.key]; ok {
				used[s.key] = true
				switch {
				case r.fullValue() == s.fullValue():
					errs = append(errs, fmt.Sprintf("line %d: %q is the same as rxe's, %q: remove it from the differences", s.line, s.key, s.fullValue()))
				case s.fullValue() != d.softhca:
					errs = append(errs, fmt.Sprintf("line %d: %q is %q, want softhca's %q (%s)", s.line, s.key, s.fullValue(), d.softhca, d.reason))
				}
			} else if r.fullValue() != s.fullValue() {
				errs = append(errs, fmt.Sprintf("line %d: %q is %q, rxe's (line %d) %q, and the field is not among the differences", s.line, s.key, s.fullValue(), r.line, r.fullValue()))
			}
			i++
			j++
			continue
		}
		if n, m, ok := matchBlock(rxe[i:], soft[j:], softText); ok {
			used["block:"+rxe[i].key] = true
			i += n
			j += m
			continue
		}
		errs = append(errs, fmt.Sprintf("field order: softhca's line %d is %q, rxe's line %d %q (a missing or extra field)", s.line, s.layout(), r.line, r.layout()))
		return errs
	}
	for ; i < len(rxe); i++ {
		errs = append(errs, fmt.Sprintf("softhca lacks rxe's line %d %q", rxe[i].line, rxe[i].layout()))
	}
	for ; j < len(soft); j++ {
		errs = append(errs, fmt.Sprintf("softhca's line %d %q is not in rxe's", soft[j].line, soft[j].layout()))
	}
	for _, d := range differences {
		if !used[d.key] {
			errs = append(errs, fmt.Sprintf("difference %q matched no field", d.key))
		}
	}
	for _, b := range blocks {
		if !used["block:"+b.rxe[0]] {
			errs = append(errs, fmt.Sprintf("block in place of %q matched nothing", b.rxe))
		}
	}
	return errs
}

// matchBlock reports whether one of the blocks starts at rxe[0] and
// soft[0], and how many fields of each it spans.
func matchBlock(rxe, soft []field, softText string) (n, m int, ok bool) {
	lines := strings.Split(softText, "\n")
	for _, b := range blocks {
		if len(rxe) < len(b.rxe) {
			continue
		}
		same := true
		for k, key := range b.rxe {
			same = same && rxe[k].key == key
		}
		if !same || len(soft) == 0 {
			continue
		}
		start := soft[0].line - 1
		if start+len(b.softhca) > len(lines) {
			continue
		}
		for k, want := range b.softhca {
			same = same && lines[start+k] == want
		}
		if !same {
			continue
		}
		// Fields the block's lines make (continuation lines belong to
		// the field before them).
		m := 0
		for m < len(soft) && soft[m].line-1 < start+len(b.softhca) {
			m++
		}
		return len(b.rxe), m, true
	}
	return 0, 0, false
}

// TestVerboseMatchesRxeCapture compares softhca's ibv_devinfo -v with
// rxe0's in testdata/rxe/ibv_devinfo-v.txt, line by line.
func TestVerboseMatchesRxeCapture(t *testing.T) {
	want, err := os.ReadFile(filepath.Join(testcaps.Dir(), "ibv_devinfo-v.txt"))
	require.NoError(t, err)
	d, err := FromDevice(openDefault(t))
	require.NoError(t, err)
	var got bytes.Buffer
	require.NoError(t, Write(&got, d, true))
	errs := compareWithRxe(t, string(want), got.String())
	require.Empty(t, errs, "softhca:\n%s", got.String())
}

// TestCompareCatchesDifferences: the comparison fails on a missing
// field, an extra one, a changed layout or value, and a difference that
// is no longer one.
func TestCompareCatchesDifferences(t *testing.T) {
	want, err := os.ReadFile(filepath.Join(testcaps.Dir(), "ibv_devinfo-v.txt"))
	require.NoError(t, err)
	d, err := FromDevice(openDefault(t))
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, Write(&b, d, true))
	good := b.String()
	for _, c := range []struct {
		name, old, new, msg string
	}{
		{"missing field", "\tmax_rdd:\t\t\t0\n", "", "missing or extra field"},
		{"extra field", "\tmax_rdd:\t\t\t0\n", "\tmax_rdd:\t\t\t0\n\tmax_xyz:\t\t\t0\n", "missing or extra field"},
		{"layout", "\tmax_rdd:\t\t\t0\n", "\tmax_rdd:\t\t0\n", "layout"},
		{"value", "\tmax_rdd:\t\t\t0\n", "\tmax_rdd:\t\t\t1\n", "not among the differences"},
		{"flag line", "\t\t\t\t\tSRQ_RESIZE\n", "", "want softhca's"},
		{"difference gone", "\tmax_mw:\t\t\t\t0\n", "\tmax_mw:\t\t\t\t524287\n", "the same as rxe's"},
		{"block changed", "\tmax_ops:\t\t\t1024\n", "\tmax_ops:\t\t\t1023\n", "missing or extra field"},
		{"trailing fields", "\t\t\tGID[  1]:\t\t::ffff:10.77.0.2, RoCE v2\n\n", "", "softhca lacks"},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Contains(t, good, c.old)
			errs := compareWithRxe(t, string(want), strings.Replace(good, c.old, c.new, 1))
			require.NotEmpty(t, errs)
			require.Contains(t, strings.Join(errs, "\n"), c.msg)
		})
	}
}
