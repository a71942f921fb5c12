package pingpong

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/verbs"
)

// msg pads text with NULs to MsgSize, as the examples' buffer is.
func msg(text string) []byte {
	b := make([]byte, MsgSize)
	copy(b, text)
	return b
}

func TestMessageFormat(t *testing.T) {
	d := Dest{LID: 0, QPN: 0x11, PSN: 0xabcdef, GID: verbs.GIDFromAddr(netip.MustParseAddr("10.77.0.2"))}
	m := d.Message()
	// What rdma-core's sprintf("%04x:%06x:%06x:%s") writes for rxe's
	// GID index 1 on 10.77.0.2, NUL included.
	require.Equal(t, msg("0000:000011:abcdef:00000000000000000000ffff0a4d0002"), m[:])
	require.Len(t, "0000:000011:abcdef:00000000000000000000ffff0a4d0002", MsgSize-1)

	z := Dest{}.Message()
	require.Equal(t, msg("0000:000000:000000:00000000000000000000000000000000"), z[:], "an srq padding entry")
}

func TestMessageRoundTrip(t *testing.T) {
	for _, d := range []Dest{
		{},
		{LID: 0xffff, QPN: 0xffffff, PSN: 0xffffff, GID: verbs.GID{0xfe, 0x80, 15: 0xff}},
		{LID: 1, QPN: 0x123456, PSN: 0x000001, GID: verbs.GIDFromAddr(netip.MustParseAddr("2001:db8::1"))},
	} {
		m := d.Message()
		got, err := ParseMessage(m[:])
		require.NoError(t, err)
		require.Equal(t, d, got)
	}
}

func TestParseMessageLenient(t *testing.T) {
	// sscanf("%x:%x:%x:%s") reads any number of digits, either case, and
	// stops at the NUL; rdma-core always writes 4, 6 and 6 lower-case.
	got, err := ParseMessage(msg("1:A:00Bc:FE800000000000000000FFFF0A4D0002\x00junk"))
	require.NoError(t, err)
	require.Equal(t, Dest{LID: 1, QPN: 0xa, PSN: 0xbc,
		GID: verbs.GID{0xfe, 0x80, 10: 0xff, 11: 0xff, 12: 10, 13: 77, 14: 0, 15: 2}}, got)
}

func TestParseMessageRejects(t *testing.T) {
	gid := strings.Repeat("0", 32)
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "0 bytes, want 52"},
		{"short", msg("0000:000011:abcdef:" + gid)[:51], "51 bytes, want 52"},
		{"long", append(msg("0000:000011:abcdef:"+gid), 0), "53 bytes, want 52"},
		{"no NUL", bytes.Repeat([]byte{'0'}, MsgSize), "no NUL terminator"},
		{"all NUL", make([]byte, MsgSize), "1 colon-separated fields"},
		{"three fields", msg("0000:000011:" + gid), "3 colon-separated fields"},
		{"five fields", msg("0:1:2:3:" + gid), "5 colon-separated fields"},
		{"empty LID", msg(":000011:abcdef:" + gid), "LID \"\": want 1 to 8 hex digits"},
		{"long QPN", msg("0:123456789:0:" + gid), "QPN \"123456789\": want 1 to 8 hex digits"},
		{"bad PSN", msg("0:11:xyz:" + gid), "PSN \"xyz\" is not hexadecimal"},
		{"signed QPN", msg("0:+11:0:" + gid), "QPN \"+11\" is not hexadecimal"},
		{"prefixed PSN", msg("0:11:0x1:" + gid), "PSN \"0x1\" is not hexadecimal"},
		{"big LID", msg("10000:11:0:" + gid), "LID 0x10000 does not fit in 16 bits"},
		{"big QPN", msg("0:1000000:0:" + gid), "QPN 0x1000000 does not fit in 24 bits"},
		{"big PSN", msg("0:11:1000000:" + gid), "PSN 0x1000000 does not fit in 24 bits"},
		{"short GID", msg("0:11:0:" + gid[:31]), "want 32 hex digits"},
		{"bad GID", msg("0:11:0:" + gid[:31] + "g"), "is not hexadecimal"},
		{"text", msg("hello, world"), "1 colon-separated fields"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseMessage(tc.in)
			var me *MessageError
			require.True(t, errors.As(err, &me), "error %v", err)
			require.Contains(t, err.Error(), tc.want)
			require.Contains(t, err.Error(), "malformed address message")
		})
	}
}

func FuzzParseMessage(f *testing.F) {
	for _, d := range []Dest{{}, {QPN: 0x11, PSN: 0xabcdef, GID: verbs.GIDFromAddr(netip.MustParseAddr("10.77.0.2"))}} {
		m := d.Message()
		f.Add(m[:])
	}
	f.Add(msg("1:A:00Bc:FE800000000000000000FFFF0A4D0002"))
	f.Add([]byte("done\x00"))
	f.Fuzz(func(t *testing.T, in []byte) {
		d, err := ParseMessage(in)
		if err != nil {
			var me *MessageError
			if !errors.As(err, &me) {
				t.Fatalf("error %v is not a *MessageError", err)
			}
			return
		}
		if d.QPN > 0xffffff || d.PSN > 0xffffff {
			t.Fatalf("parsed %+v out of range", d)
		}
		// What parses re-encodes canonically and parses the same.
		m := d.Message()
		again, err := ParseMessage(m[:])
		if err != nil || again != d {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", in, d, m, again, err)
		}
	})
}

// rw is a scripted peer: what it will send, and what it got.
type rw struct {
	in  *bytes.Reader
	out bytes.Buffer
}

func (p *rw) Read(b []byte) (int, error)  { return p.in.Read(b) }
func (p *rw) Write(b []byte) (int, error) { return p.out.Write(b) }

func TestExchangeClient(t *testing.T) {
	me := []Dest{{QPN: 0x11, PSN: 1}}
	peer := Dest{QPN: 0x22, PSN: 2, GID: verbs.GIDFromAddr(netip.MustParseAddr("10.0.0.2"))}
	pm := peer.Message()
	p := &rw{in: bytes.NewReader(pm[:])}
	var connected []Dest
	got, err := ClientExchange(p, me, func(r []Dest) error { connected = r; return nil })
	require.NoError(t, err)
	require.Equal(t, []Dest{peer}, got)
	require.Equal(t, got, connected)
	mm := me[0].Message()
	require.Equal(t, append(mm[:], "done\x00"...), p.out.Bytes(), "message then done")

	// A client that cannot connect sends no "done": the server, waiting
	// for it, sees the connection close and fails too.
	p = &rw{in: bytes.NewReader(pm[:])}
	_, err = ClientExchange(p, me, func([]Dest) error { return errors.New("Failed to modify QP to RTR: no route") })
	require.EqualError(t, err, "Failed to modify QP to RTR: no route", "the connect error as it is")
	require.Equal(t, mm[:], p.out.Bytes(), "the message, no done")

	// The server went away without answering (it failed to connect).
	_, err = ClientExchange(&rw{in: bytes.NewReader(nil)}, me, nil)
	require.EqualError(t, err, "Couldn't read/write remote address: the peer closed the connection (see its messages)")
	// Garbage instead of an address.
	_, err = ClientExchange(&rw{in: bytes.NewReader(msg("nonsense"))}, me, nil)
	require.ErrorContains(t, err, "Couldn't read/write remote address: malformed address message \"nonsense\"")
}

func TestExchangeServer(t *testing.T) {
	me := make([]Dest, SRQMessages)
	me[0] = Dest{QPN: 0x11, PSN: 1}
	var script bytes.Buffer
	for i := range SRQMessages {
		m := Dest{QPN: uint32(0x100 + i)}.Message()
		script.Write(m[:])
	}
	script.WriteString("done\x00")
	p := &rw{in: bytes.NewReader(script.Bytes())}
	var connected []Dest
	got, err := ServerExchange(p, me, func(r []Dest) error { connected = r; return nil })
	require.NoError(t, err)
	require.Len(t, got, SRQMessages)
	require.Equal(t, got, connected)
	require.Equal(t, uint32(0x1ff), got[255].QPN)
	require.Equal(t, SRQMessages*MsgSize, p.out.Len(), "256 answers, as srq_pingpong")

	// A failed connect answers nothing.
	p = &rw{in: bytes.NewReader(script.Bytes())}
	_, err = ServerExchange(p, me, func([]Dest) error { return errors.New("no GRH") })
	require.EqualError(t, err, "no GRH\nCouldn't connect to remote QP")
	require.Zero(t, p.out.Len())

	// Short of messages, or no "done".
	p = &rw{in: bytes.NewReader(script.Bytes()[:100*MsgSize+3])}
	_, err = ServerExchange(p, me, func([]Dest) error { return nil })
	require.EqualError(t, err, "Couldn't read remote address [100]: the peer closed the connection (see its messages)")
	one := []Dest{{QPN: 1}}
	m := Dest{QPN: 2}.Message()
	_, err = ServerExchange(&rw{in: bytes.NewReader(append(m[:], "dona\x00"...))}, one, func([]Dest) error { return nil })
	require.ErrorContains(t, err, `Couldn't send/recv local address: got "dona\x00"`)
	_, err = ServerExchange(&rw{in: bytes.NewReader(m[:])}, one, func([]Dest) error { return nil })
	require.EqualError(t, err, "Couldn't send/recv local address: the peer closed the connection (see its messages)")
}
