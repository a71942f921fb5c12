package devinfo

import (
	"bytes"
	"encoding/json"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/verbs"
)

var update = flag.Bool("update", false, "rewrite testdata/softhca0.json")

// TestShortForm: ibv_devinfo without -v.
func TestShortForm(t *testing.T) {
	d, err := FromDevice(openDefault(t))
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, Write(&b, d, false))
	require.Equal(t, "hca_id:\tsofthca0\n"+
		"\ttransport:\t\t\tInfiniBand (0)\n"+
		"\tfw_ver:\t\t\t\t0.0.0\n"+
		"\tnode_guid:\t\t\t0000:0aff:fe4d:0002\n"+
		"\tsys_image_guid:\t\t\t0000:0aff:fe4d:0002\n"+
		"\tvendor_id:\t\t\t0xffffff\n"+
		"\tvendor_part_id:\t\t\t0\n"+
		"\thw_ver:\t\t\t\t0x0\n"+
		"\tphys_port_cnt:\t\t\t1\n"+
		"\t\tport:\t1\n"+
		"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n"+
		"\t\t\tmax_mtu:\t\t4096 (5)\n"+
		"\t\t\tactive_mtu:\t\t1024 (3)\n"+
		"\t\t\tsm_lid:\t\t\t0\n"+
		"\t\t\tport_lid:\t\t0\n"+
		"\t\t\tport_lmc:\t\t0x00\n"+
		"\t\t\tlink_layer:\t\tEthernet\n"+
		"\n", b.String())
}

func TestWriteList(t *testing.T) {
	for _, c := range []struct {
		names []string
		want  string
	}{
		{nil, "0 HCAs found:\n\n"},
		{[]string{"softhca0"}, "1 HCA found:\n\tsofthca0\n\n"},
		{[]string{"softhca0", "rxe0"}, "2 HCAs found:\n\tsofthca0\n\trxe0\n\n"},
	} {
		var b bytes.Buffer
		require.NoError(t, WriteList(&b, c.names))
		require.Equal(t, c.want, b.String())
	}
}

// TestWriteOptionalFields: the fields devinfo.c prints only for some
// values, in its formats.
func TestWriteOptionalFields(t *testing.T) {
	base, err := FromDevice(openDefault(t))
	require.NoError(t, err)
	for _, c := range []struct {
		name   string
		change func(d *Device)
		want   []string // consecutive lines
		absent []string
	}{
		{"no fw_ver", func(d *Device) { d.Attr.FWVer = "" }, nil, []string{"fw_ver"}},
		{"board_id", func(d *Device) { d.BoardID = "MT_0000000010" }, []string{"\thw_ver:\t\t\t\t0x0", "\tboard_id:\t\t\tMT_0000000010", "\tphys_port_cnt:\t\t\t1"}, nil},
		{"fmr", func(d *Device) { d.Attr.MaxFMR, d.Attr.MaxMapPerFMR = 5, 7 }, []string{"\tmax_fmr:\t\t\t5", "\tmax_map_per_fmr:\t\t7", "\tmax_srq:\t\t\t917503"}, nil},
		{"no srq", func(d *Device) { d.Attr.MaxSRQ = 0 }, []string{"\tmax_srq:\t\t\t0", "\tmax_pkeys:\t\t\t64"}, []string{"max_srq_wr"}},
		{"int fields print as C ints", func(d *Device) { d.Attr.MaxQP = 1 << 31 }, []string{"\tmax_qp:\t\t\t\t-2147483648"}, nil},
		{"unknown cap flags", func(d *Device) { d.Attr.DeviceCapFlags = 1<<0 | 1<<30 | 1<<15 }, []string{"\tdevice_cap_flags:\t\t0x40008001", "\t\t\t\t\tRESIZE_MAX_WR", "\t\t\t\t\tUnknown flags: 0x40008000", "\tmax_sge:\t\t\t32"}, nil},
		{"odp", func(d *Device) {
			d.AttrEx.ODPCaps = ODPCaps{GeneralCaps: 3 | 1<<40, RCODPCaps: 0x3f | 1<<9}
			d.AttrEx.XRCODPCaps = 1 << 5
		}, []string{"\tgeneral_odp_caps:", "\t\t\t\t\tODP_SUPPORT", "\t\t\t\t\tODP_SUPPORT_IMPLICIT", "\t\t\t\t\tUnknown flags: 0x10000000000",
			"\trc_odp_caps:", "\t\t\t\t\tSUPPORT_SEND", "\t\t\t\t\tSUPPORT_RECV", "\t\t\t\t\tSUPPORT_WRITE", "\t\t\t\t\tSUPPORT_READ",
			"\t\t\t\t\tSUPPORT_ATOMIC", "\t\t\t\t\tSUPPORT_SRQ", "\t\t\t\t\tUnknown flags: 0x200",
			"\tuc_odp_caps:", "\t\t\t\t\tNO SUPPORT", "\tud_odp_caps:", "\t\t\t\t\tNO SUPPORT", "\txrc_odp_caps:", "\t\t\t\t\tSUPPORT_SRQ"}, nil},
		{"timestamps", func(d *Device) { d.AttrEx.CompletionTimestampMask, d.AttrEx.HCACoreClock = 0x7fffffffffff, 156250 },
			[]string{"\tcompletion timestamp_mask:\t\t\t0x00007fffffffffff", "\thca_core_clock:\t\t\t156250kHZ", "\tdevice_cap_flags_ex:\t\t0x3C76"}, nil},
		{"raw packet caps", func(d *Device) { d.AttrEx.RawPacketCaps = 0xf },
			[]string{"\traw packet caps:", "\t\t\t\t\tC-VLAN stripping offload", "\t\t\t\t\tScatter FCS offload", "\t\t\t\t\tIP csum offload", "\t\t\t\t\tDelay drop", "\tdevice_cap_flags_ex:\t\t0x3C76"}, nil},
		{"cap flags ex", func(d *Device) { d.AttrEx.DeviceCapFlagsEx = 1<<34 | 1<<36 | 1<<40 | 0x3c76 },
			[]string{"\tdevice_cap_flags_ex:\t\t0x11400003C76", "\t\t\t\t\tRAW_SCATTER_FCS", "\t\t\t\t\tPCI_WRITE_END_PADDING", "\t\t\t\t\tUnknown flags: 0x10000000000", "\ttso_caps:"}, nil},
		{"tso rss pacing", func(d *Device) {
			d.AttrEx.TSOCaps = TSOCaps{MaxTSO: 262144, SupportedQPTs: 1<<8 | 1<<4}
			d.AttrEx.RSSCaps = RSSCaps{SupportedQPTs: 1<<8 | 1<<2, MaxRWQIndirectionTables: 64, MaxRWQIndirectionTableSize: 512, RXHashFieldsMask: 0x800000ff, RXHashFunction: 1}
			d.AttrEx.PacketPacingCaps = PacketPacingCaps{QPRateLimitMin: 1, QPRateLimitMax: 100000000, SupportedQPTs: 1 << 4}
			d.AttrEx.MaxWQTypeRQ = 8
		}, []string{"\ttso_caps:", "\t\tmax_tso:\t\t\t262144", "\t\tsupported_qp:", "\t\t\t\t\tSUPPORT_RAW_PACKET", "\t\t\t\t\tSUPPORT_UD",
			"\trss_caps:", "\t\tmax_rwq_indirection_tables:\t\t\t64", "\t\tmax_rwq_indirection_table_size:\t\t\t512",
			"\t\trx_hash_function:\t\t\t\t0x1", "\t\trx_hash_fields_mask:\t\t\t\t0x800000FF",
			"\t\tsupported_qp:", "\t\t\t\t\tSUPPORT_RAW_PACKET", "\t\t\t\t\tUnknown flags: 0x4",
			"\tmax_wq_type_rq:\t\t\t8", "\tpacket_pacing_caps:", "\t\tqp_rate_limit_min:\t1kbps", "\t\tqp_rate_limit_max:\t100000000kbps",
			"\t\tsupported_qp:", "\t\t\t\t\tSUPPORT_UD", "\tmax_rndv_hdr_size:\t\t64"}, nil},
		{"no tag matching", func(d *Device) { d.AttrEx.TMCaps = TMCaps{} }, []string{"\ttag matching not supported", "\tnum_comp_vectors:\t\t1"}, []string{"max_num_tags"}},
		{"cq moderation and device memory", func(d *Device) {
			d.AttrEx.CQModCaps = CQModCaps{MaxCQCount: 65535, MaxCQPeriod: 4095}
			d.AttrEx.MaxDMSize = 131072
		}, []string{"\t\t\t\t\tIBV_TM_CAP_RC", "", "\tcq moderation caps:", "\t\tmax_cq_count:\t65535", "\t\tmax_cq_period:\t4095 us", "",
			"\tmaximum available device memory:\t131072Bytes", "", "\tnum_comp_vectors:\t\t1"}, nil},
		{"odd port values", func(d *Device) {
			a := &d.Ports[0].Attr
			a.State, a.MaxMTU, a.ActiveMTU, a.LinkLayer = 7, 0, 6, 7
			a.MaxVLNum, a.ActiveWidth, a.ActiveSpeed, a.PhysState = 9, 3, 3, 9
		}, []string{
			"\t\tport:\t1",
			"\t\t\tstate:\t\t\tinvalid state (7)",
			"\t\t\tmax_mtu:\t\tinvalid MTU (0)",
			"\t\t\tactive_mtu:\t\tinvalid MTU (6)",
			"\t\t\tsm_lid:\t\t\t0",
			"\t\t\tport_lid:\t\t0",
			"\t\t\tport_lmc:\t\t0x00",
			"\t\t\tlink_layer:\t\tUnknown",
			"\t\t\tmax_msg_sz:\t\t0x80000000",
			"\t\t\tport_cap_flags:\t\t0x00010000",
			"\t\t\tport_cap_flags2:\t0x0000",
			"\t\t\tmax_vl_num:\t\tinvalid value (9)",
			"\t\t\tbad_pkey_cntr:\t\t0x0",
			"\t\t\tqkey_viol_cntr:\t\t0x0",
			"\t\t\tsm_sl:\t\t\t0",
			"\t\t\tpkey_tbl_len:\t\t1",
			"\t\t\tgid_tbl_len:\t\t1024",
			"\t\t\tsubnet_timeout:\t\t0",
			"\t\t\tinit_type_reply:\t0",
			"\t\t\tactive_width:\t\tinvalid widthX (3)",
			"\t\t\tactive_speed:\t\tinvalid speed (3)",
			"\t\t\tphys_state:\t\tinvalid physical state (9)",
			"\t\t\tGID[  0]:\t\tfe80::aff:fe4d:2", // no GID type but on Ethernet
			"\t\t\tGID[  1]:\t\t::ffff:10.77.0.2",
			"",
		}, nil},
		{"InfiniBand port", func(d *Device) {
			d.Ports[0].Attr.LinkLayer = verbs.LinkLayerInfiniBand
			d.Ports[0].GIDs = []GIDEntry{{Index: 0, GID: mustGID("fe80::2:c903:a:b"), Type: GIDTypeIBRoCEv1}}
		}, []string{"\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:0002:c903:000a:000b", ""}, nil},
		{"iWARP", func(d *Device) { d.Transport = TransportIWARP }, []string{"\ttransport:\t\t\tiWARP (1)", "\tfw_ver:\t\t\t\t0.0.0"}, nil},
		{"unknown transport", func(d *Device) { d.Transport = TransportUnknown }, []string{"\ttransport:\t\t\tinvalid transport (-1)"}, nil},
		{"iWARP has no phys_state", func(d *Device) { d.Transport = TransportIWARP },
			[]string{"\t\t\tactive_speed:\t\t2.5 Gbps (1)", "\t\t\tGID[  0]:\t\tfe80::aff:fe4d:2, RoCE v2"}, []string{"phys_state"}},
		{"GIDs devinfo.c does not print", func(d *Device) {
			d.Ports[0].GIDs = []GIDEntry{
				{Index: 0, GID: mustGID("fe80::"), Type: GIDTypeRoCEv2},      // null: the interface identifier is zero
				{Index: 1, GID: mustGID("::ffff:1.2.3.4"), Type: GIDType(2)}, // a type devinfo.c cannot name
				{Index: 2000, GID: mustGID("::1"), Type: GIDTypeRoCEv2},      // beyond gid_tbl_len
				{Index: 3, GID: mustGID("::1.2.3.4"), Type: GIDTypeIBRoCEv1},
				{Index: 1023, GID: mustGID("2001:db8::1"), Type: GIDTypeRoCEv2},
			}
		}, []string{"\t\t\tphys_state:\t\tLINK_UP (5)", "\t\t\tGID[  3]:\t\t0000:0000:0000:0000:0000:0000:0102:0304, RoCE v1", "\t\t\tGID[1023]:\t\t2001:db8::1, RoCE v2", ""}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := clone(t, base)
			c.change(&d)
			var b bytes.Buffer
			require.NoError(t, Write(&b, d, true))
			out := b.String()
			if c.want != nil {
				require.Contains(t, out, "\n"+strings.Join(c.want, "\n")+"\n", "in:\n%s", out)
			}
			for _, a := range c.absent {
				require.NotContains(t, out, a)
			}
		})
	}
}

func mustGID(s string) GID { return GID(netip.MustParseAddr(s).As16()) }

// clone deep-copies a Device through JSON.
func clone(t *testing.T, d Device) Device {
	t.Helper()
	b, err := json.Marshal(d)
	require.NoError(t, err)
	var c Device
	require.NoError(t, json.Unmarshal(b, &c))
	return c
}

// TestPortSelection: Write prints the ports it is given, as ibv_devinfo
// -i prints one.
func TestPortSelection(t *testing.T) {
	d, err := FromDevice(openDefault(t))
	require.NoError(t, err)
	p, ok := d.Port(1)
	require.True(t, ok)
	require.Equal(t, uint8(1), p.Num)
	_, ok = d.Port(2)
	require.False(t, ok)
	d.Ports = nil
	var b bytes.Buffer
	require.NoError(t, Write(&b, d, true))
	require.True(t, strings.HasSuffix(b.String(), "\tnum_comp_vectors:\t\t1\n"), b.String())
}

// TestJSONGolden: the JSON names are stable: testdata/softhca0.json is
// the default device on 10.77.0.2 (go test -update rewrites it).
func TestJSONGolden(t *testing.T) {
	d, err := FromDevice(openDefault(t))
	require.NoError(t, err)
	got, err := json.MarshalIndent(d, "", "  ")
	require.NoError(t, err)
	got = append(got, '\n')
	path := filepath.Join("testdata", "softhca0.json")
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))

	var back Device
	require.NoError(t, json.Unmarshal(want, &back))
	require.Equal(t, d, back, "JSON round trip")
}

// TestJSONRejects: bad GUIDs, GIDs and GID types in JSON are errors that
// say what was wrong.
func TestJSONRejects(t *testing.T) {
	for _, c := range []struct{ doc, msg string }{
		{`{"attr":{"node_guid":"1:2:3"}}`, "want four groups"},
		{`{"attr":{"node_guid":"1:2:3:xyz"}}`, `"xyz" is not one to four hex digits`},
		{`{"attr":{"node_guid":"1:2:3:12345"}}`, "not one to four hex digits"},
		{`{"attr":{"node_guid":"1:2:3:-1"}}`, "not one to four hex digits"},
		{`{"attr":{"max_mr_size":"x"}}`, `"x" into uint64`},
		{`{"attr":{"max_mr_size":18446744073709551615}}`, "into uint64"}, // a 64-bit number is a string
		{`{"ports":[{"gids":[{"gid":"fe80::1%eth0"}]}]}`, "want an IPv6 address"},
		{`{"ports":[{"gids":[{"gid":"nope"}]}]}`, "want an IPv6 address"},
		{`{"ports":[{"gids":[{"type":"RoCE v3"}]}]}`, `"RoCE v3"`},
	} {
		var d Device
		err := json.Unmarshal([]byte(c.doc), &d)
		require.Error(t, err, c.doc)
		require.Contains(t, err.Error(), c.msg, c.doc)
	}
	_, err := json.Marshal(GIDEntry{Type: 7})
	require.ErrorContains(t, err, "GID type 7")
}

func TestGUIDText(t *testing.T) {
	var g GUID
	require.NoError(t, g.UnmarshalText([]byte("5054:ff:fe77:2")))
	require.Equal(t, GUID(0x505400fffe770002), g)
	require.Equal(t, "5054:00ff:fe77:0002", g.String())
}

// TestGIDText: GIDs print as glibc's inet_ntop prints them.
func TestGIDText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"::", "::"},
		{"::1", "::1"},
		{"::ffff:10.77.0.2", "::ffff:10.77.0.2"},
		{"::1.2.3.4", "::1.2.3.4"},
		{"::ffff:0:0", "::ffff:0.0.0.0"},
		{"fe80::5054:ff:fe77:2", "fe80::5054:ff:fe77:2"},
		{"2001:db8::1", "2001:db8::1"},
		{"1:0:0:1:0:0:0:1", "1:0:0:1::1"},
		{"1:0:0:1:1:0:0:1", "1::1:1:0:0:1"},
		{"1:0:1:0:1:0:1:0", "1:0:1:0:1:0:1:0"},
		{"1:2:3:4:5:6:7:0", "1:2:3:4:5:6:7:0"},
		{"1:2:3:4:5:6::", "1:2:3:4:5:6::"},
		{"ffff::ffff:1.2.3.4", "ffff::ffff:102:304"},
	} {
		g := mustGID(c.in)
		require.Equal(t, c.want, g.String(), c.in)
		var back GID
		require.NoError(t, back.UnmarshalText([]byte(g.String())))
		require.Equal(t, g, back)
	}
	var g GID
	require.NoError(t, g.UnmarshalText([]byte("10.77.0.2")))
	require.Equal(t, "::ffff:10.77.0.2", g.String(), "an IPv4 address is its mapped GID")
}

// TestVerbsRoundTrip: every field of verbs.DeviceAttr and
// verbs.PortAttr has its place in Device (a field added to verbs fails
// here until devinfo carries it).
func TestVerbsRoundTrip(t *testing.T) {
	var a verbs.DeviceAttr
	fillDistinct(reflect.ValueOf(&a).Elem(), new(uint64))
	d := Device{Attr: attrFromVerbs(a), AttrEx: AttrEx{TMCaps: TMCaps(a.TM)}}
	require.Equal(t, a, d.VerbsAttr())

	var p verbs.PortAttr
	fillDistinct(reflect.ValueOf(&p).Elem(), new(uint64))
	require.Equal(t, p, Port{Attr: portAttrFromVerbs(p)}.VerbsAttr())
}

// fillDistinct gives every field of v a different non-zero value.
func fillDistinct(v reflect.Value, n *uint64) {
	switch v.Kind() {
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			fillDistinct(v.Field(i), n)
		}
	case reflect.String:
		*n++
		v.SetString(strings.Repeat("x", int(*n)))
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		*n++
		v.SetUint(*n)
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Int:
		*n++
		v.SetInt(int64(*n))
	default:
		panic("fillDistinct: " + v.Kind().String())
	}
}

func TestFromDeviceErrors(t *testing.T) {
	_, err := FromDevice(nil)
	require.ErrorIs(t, err, syscall.EINVAL)
	require.ErrorContains(t, err, "no device")

	// Two addresses and a second P_Key entry: the table is what
	// QueryGID and QueryPKey return.
	d, err := hca.Open(hca.Config{
		Name:     "softhca3",
		Addrs:    []netip.Addr{netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("2001:db8::7")},
		PortAttr: verbs.PortAttr{PKeyTblLen: 2, GIDTblLen: 8},
	})
	require.NoError(t, err)
	defer d.Close()
	dev, err := FromDevice(d)
	require.NoError(t, err)
	require.Equal(t, "softhca3", dev.Name)
	require.Len(t, dev.Ports, 1)
	require.Equal(t, []uint16{0xffff, 0}, dev.Ports[0].PKeys)
	var gids []string
	for _, e := range dev.Ports[0].GIDs {
		require.Equal(t, GIDTypeRoCEv2, e.Type)
		gids = append(gids, e.GID.String())
	}
	require.Equal(t, []string{"fe80::c0ff:fe00:207", "::ffff:192.0.2.7", "2001:db8::7"}, gids)
}
