package perftest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/verbs"
)

// perftestDest is a key message as perftest 4.5-0.17 writes it for an
// rxe device at 10.77.0.2 (RoCEv2 GID index 1): sprintf of
// KEY_PRINT_FMT_GID into char[108].
const perftestDest = "0000:0080:000011:3b4d6a:00000203:00007f0c4ad0d000:" +
	"00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:02:00000000:"

func TestDestVector(t *testing.T) {
	require.Len(t, perftestDest, DestSize-1)
	b := append([]byte(perftestDest), 0)
	d, err := ParseDest(b)
	require.NoError(t, err)
	want := Dest{OutReads: 0x80, QPN: 0x11, PSN: 0x3b4d6a, RKey: 0x203, VAddr: 0x7f0c4ad0d000,
		GID: verbs.GIDFromAddr(netip.MustParseAddr("10.77.0.2"))}
	require.Equal(t, want, d)
	require.Equal(t, b, d.Encode())
}

func TestDestRoundTrip(t *testing.T) {
	for _, d := range []Dest{
		{},
		{LID: 0xffff, OutReads: 0xffff, QPN: 0xffffff, PSN: 0xffffff, RKey: 0xffffffff, VAddr: math.MaxUint64,
			GID: verbs.GIDFromAddr(netip.MustParseAddr("2001:db8::1")), SRQN: 0xffffffff},
		{OutReads: 1, QPN: 0x123456, PSN: 0xabcdef, RKey: 0x1234, VAddr: 0xc000123000,
			GID: verbs.GIDFromAddr(netip.MustParseAddr("127.0.0.1"))},
	} {
		b := d.Encode()
		require.Len(t, b, DestSize)
		require.Zero(t, b[DestSize-1])
		got, err := ParseDest(b)
		require.NoError(t, err)
		require.Equal(t, d, got)
	}
}

func TestDestGarbage(t *testing.T) {
	good := append([]byte(perftestDest), 0)
	mutate := func(f func(b []byte) []byte) []byte {
		return f(bytes.Clone(good))
	}
	// pad makes a message of s: NUL-padded to DestSize (s is shorter).
	pad := func(s string) []byte { return append([]byte(s), make([]byte, DestSize-len(s))...) }
	// A vaddr with one digit fewer leaves room for a wider field.
	short := strings.Replace(perftestDest, ":00007f0c4ad0d000:", ":0007f0c4ad0d000:", 1)
	cases := map[string][]byte{
		"empty":         {},
		"short":         good[:DestSize-1],
		"long":          append(bytes.Clone(good), 0),
		"no NUL":        bytes.Repeat([]byte{'0'}, DestSize),
		"all NUL":       make([]byte, DestSize),
		"non-hex":       mutate(func(b []byte) []byte { b[0] = 'g'; return b }),
		"sign":          mutate(func(b []byte) []byte { b[0] = '-'; return b }),
		"0x prefix":     pad(strings.Replace(short, ":000011:", ":0x11:", 1)),
		"missing field": pad(strings.Replace(perftestDest, "0000:0080:", "0080:", 1)),
		"empty field":   mutate(func(b []byte) []byte { copy(b, ":::::"); return b }),
		"QPN too wide":  pad(strings.Replace(short, ":000011:", ":1000011:", 1)),
		"LID too wide":  pad(strings.Replace(short, "0000:", "10000:", 1)),
		"GID too wide":  pad(strings.Replace(short, ":ff:ff:", ":ff:1ff:", 1)),
		"no final :":    mutate(func(b []byte) []byte { b[len(perftestDest)-1] = 0; return b }),
		"NUL inside":    mutate(func(b []byte) []byte { b[20] = 0; return b }),
		"extra field":   pad(strings.TrimSuffix(perftestDest, "00000000:") + "0:0:"),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseDest(b)
			require.ErrorIs(t, err, ErrMalformed, "%q", b)
		})
	}
}

func TestVersion(t *testing.T) {
	b := EncodeVersion(Version)
	require.Equal(t, append([]byte("6.06"), make([]byte, 12)...), b)
	s, f, err := ParseVersion(b)
	require.NoError(t, err)
	require.Equal(t, "6.06", s)
	require.InDelta(t, 6.06, f, 1e-9)

	s, f, err = ParseVersion(EncodeVersion("5.70-beta"))
	require.NoError(t, err)
	require.Equal(t, "5.70-beta", s)
	require.InDelta(t, 5.70, f, 1e-9)

	for _, b := range [][]byte{
		nil,
		make([]byte, VersionSize), // empty
		EncodeVersion("abc"),      // no number
		EncodeVersion("6\x01"),    // control byte
		append([]byte("6.06"), bytes.Repeat([]byte{0xff}, 12)...), // NUL missing, high bytes
		make([]byte, VersionSize+1),
	} {
		_, _, err := ParseVersion(b)
		require.ErrorIs(t, err, ErrMalformed, "%q", b)
	}
}

func TestSysData(t *testing.T) {
	require.Equal(t, []byte{0, 0, 0x10, 0}, EncodeInt32(4096))
	v, err := ParseCycleBuffer(EncodeInt32(65536))
	require.NoError(t, err)
	require.Equal(t, 65536, v)
	v, err = ParseCacheLine(EncodeInt32(128))
	require.NoError(t, err)
	require.Equal(t, 128, v)
	for _, b := range [][]byte{nil, {0, 0, 0}, EncodeInt32(0), EncodeInt32(-4096), EncodeInt32(3000), EncodeInt32(1 << 30)} {
		_, err := ParseCycleBuffer(b)
		require.ErrorIs(t, err, ErrMalformed, "% x", b)
	}
	_, err = ParseCacheLine(EncodeInt32(8192))
	require.ErrorIs(t, err, ErrMalformed)
}

func TestMTU(t *testing.T) {
	require.Equal(t, []byte("3\x00"), EncodeMTU(verbs.MTU1024))
	for m := verbs.MTU256; m <= verbs.MTU4096; m++ {
		got, err := ParseMTU(EncodeMTU(m))
		require.NoError(t, err)
		require.Equal(t, m, got)
	}
	for _, b := range [][]byte{nil, {'3'}, []byte("0\x00"), []byte("6\x00"), []byte("x\x00"), []byte("\x00\x00"), []byte("-1")} {
		_, err := ParseMTU(b)
		require.ErrorIs(t, err, ErrMalformed, "%q", b)
	}
}

func TestReport(t *testing.T) {
	r := Report{Size: 65536, Iters: 5000, Peak: 1010.12, Avg: 1009.87, MsgRate: 0.016158}
	f := r.EncodeFields()
	// Network byte order: size 65536 is 00 00 00 00 00 01 00 00, and the
	// doubles are their IEEE bits in big-endian order (hton_double).
	require.Equal(t, []byte{0, 0, 0, 0, 0, 1, 0, 0}, f[0])
	require.Equal(t, math.Float64bits(1010.12), binary.BigEndian.Uint64(f[2]))
	got, err := ParseReport(f)
	require.NoError(t, err)
	require.Equal(t, r, got)

	bad := f
	bad[3] = binary.BigEndian.AppendUint64(nil, math.Float64bits(math.NaN()))
	_, err = ParseReport(bad)
	require.ErrorIs(t, err, ErrMalformed)
	bad[3] = []byte{1, 2, 3}
	_, err = ParseReport(bad)
	require.ErrorIs(t, err, ErrMalformed)
}

// FuzzParseDest: any input either parses into a Dest that encodes back
// to the same fields, or is an error wrapping ErrMalformed; never a
// panic.
func FuzzParseDest(f *testing.F) {
	f.Add(append([]byte(perftestDest), 0))
	f.Add((&Dest{QPN: 0x11, GID: verbs.GIDFromAddr(netip.MustParseAddr("::1"))}).Encode())
	f.Add(make([]byte, DestSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDest(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		d2, err := ParseDest(d.Encode())
		if err != nil || d2 != d {
			t.Fatalf("%+v does not survive encoding: %+v, %v", d, d2, err)
		}
	})
}

// FuzzParseSmall covers the version, system data, MTU and report parsers:
// errors wrap ErrMalformed, and what parses encodes back to a message
// that parses the same.
func FuzzParseSmall(f *testing.F) {
	f.Add(EncodeVersion(Version))
	f.Add(EncodeInt32(4096))
	f.Add(EncodeMTU(verbs.MTU1024))
	f.Add(bytes.Repeat([]byte{0x40}, ReportFields*ReportFieldSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		check := func(err error) {
			if err != nil && !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
		}
		s, v, err := ParseVersion(b)
		check(err)
		if err == nil && len(s) < VersionSize { // EncodeVersion NUL-terminates
			s2, v2, err := ParseVersion(EncodeVersion(s))
			require.NoError(t, err)
			require.Equal(t, s, s2)
			require.Equal(t, v, v2)
		}
		c, err := ParseCycleBuffer(b)
		check(err)
		if err == nil {
			c2, err := ParseCycleBuffer(EncodeInt32(c))
			require.NoError(t, err)
			require.Equal(t, c, c2)
		}
		c, err = ParseCacheLine(b)
		check(err)
		if err == nil {
			c2, err := ParseCacheLine(EncodeInt32(c))
			require.NoError(t, err)
			require.Equal(t, c, c2)
		}
		m, err := ParseMTU(b)
		check(err)
		if err == nil && (m < verbs.MTU256 || m > verbs.MTU4096) {
			t.Fatalf("MTU %q parsed as %v", b, m)
		}
		if err == nil {
			m2, err := ParseMTU(EncodeMTU(m))
			require.NoError(t, err)
			require.Equal(t, m, m2)
		}
		var fields [ReportFields][]byte
		for i := range fields {
			lo := min(i*ReportFieldSize, len(b))
			fields[i] = b[lo:min(lo+ReportFieldSize, len(b))]
		}
		r, err := ParseReport(fields)
		check(err)
		if err == nil {
			r2, err := ParseReport(r.EncodeFields())
			require.NoError(t, err)
			require.Equal(t, r, r2)
		}
	})
}
