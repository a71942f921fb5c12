package hcaenv

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/verbs"
)

func TestParseRate(t *testing.T) {
	for in, want := range map[string]float64{
		"":            0,
		"200M":        200e6,
		"200 Mbit/s":  200e6,
		"1.5G":        1.5e9,
		"1.5Gbps":     1.5e9,
		"64k":         64e3,
		"64K":         64e3,
		"100000000":   100e6,
		" 10Mbit ":    10e6,
		"10000G":      1e13,
		"1e9":         1e9,
		"2.5e8bit/s":  2.5e8,
		"1000":        1000,
		"1000 bit/s":  1000,
		"0.001M":      1000,
		"7.25Mbit/s ": 7.25e6,
	} {
		got, err := ParseRate(in)
		require.NoError(t, err, "%q", in)
		require.InDelta(t, want, got, want*1e-12, "%q", in)
	}
	for _, in := range []string{"fast", "-5M", "0", "999", "1T", "20000G", "NaN", "Inf", "M", "10 M M", "200m", "1e400"} {
		_, err := ParseRate(in)
		require.ErrorIs(t, err, syscall.EINVAL, "%q", in)
	}
}

// FuzzParseRate: any string is a rate in range or EINVAL, never a panic.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"200M", "1.5Gbps", "", "1e9", "-1", "NaN", "10 M"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseRate(s)
		if err != nil {
			require.ErrorIs(t, err, syscall.EINVAL)
			require.Zero(t, v)
			return
		}
		if v != 0 {
			require.False(t, math.IsNaN(v) || math.IsInf(v, 0))
			require.GreaterOrEqual(t, v, 1e3)
			require.LessOrEqual(t, v, 1e13)
			// As Env prints it, it reads back the same.
			back, err := ParseRate(strconv.FormatFloat(v, 'f', -1, 64))
			require.NoError(t, err)
			require.Equal(t, v, back)
		}
	})
}

func TestParse(t *testing.T) {
	s, err := Parse(map[string]string{
		VarAddr: "127.0.0.2", VarPort: "4792", VarPeerPort: "4793", VarDevice: "rxe7",
		VarMTU: "1024", VarBusyPoll: "0", VarRate: "200M", VarLog: "2",
	})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.2", s.Addr.String())
	require.Equal(t, uint16(4792), s.Port)
	require.Equal(t, uint16(4793), s.PeerPort)
	require.Equal(t, "rxe7", s.Device)
	require.Equal(t, verbs.MTU1024, s.MTU)
	require.False(t, s.BusyPoll)
	require.InDelta(t, 200e6, s.Rate, 1)
	require.Equal(t, 2, s.Log)
	// Env prints what Parse reads back.
	vals := map[string]string{}
	for _, kv := range s.Env() {
		k, v, _ := cutEq(kv)
		vals[k] = v
	}
	back, err := Parse(vals)
	require.NoError(t, err)
	require.Equal(t, s, back)

	def, err := Parse(nil)
	require.NoError(t, err)
	require.False(t, def.Addr.IsValid(), "no address: no device")
	require.Equal(t, uint16(4791), def.Port)
	require.Equal(t, "softhca0", def.Device)
	require.True(t, def.BusyPoll, "C programs poll their CQs")
	_, err = Open(def)
	require.ErrorIs(t, err, syscall.ENODEV)
	// Without an address Env says nothing of one (it printed
	// SOFTHCA_ADDR=invalid IP, which Parse refuses), and reads back.
	def.Port = 4800
	require.Equal(t, []string{VarPort + "=4800"}, def.Env())
	vals = map[string]string{}
	for _, kv := range def.Env() {
		k, v, _ := cutEq(kv)
		vals[k] = v
	}
	back, err = Parse(vals)
	require.NoError(t, err)
	require.Equal(t, def, back)
}

func cutEq(kv string) (string, string, bool) {
	for i := range kv {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}

func TestParseRefuses(t *testing.T) {
	for k, v := range map[string]string{
		VarAddr: "0.0.0.0", VarPort: "0", VarPeerPort: "65536", VarDevice: "a/b",
		VarMTU: "1500", VarBusyPoll: "yes please", VarRate: "fast", VarLog: "9",
		"SOFTHCA_ADRR": "127.0.0.1",
	} {
		_, err := Parse(map[string]string{k: v})
		require.ErrorIs(t, err, syscall.EINVAL, "%s=%s", k, v)
		require.Contains(t, err.Error(), k)
	}
	_, err := Parse(map[string]string{VarAddr: "fe80::1%eth0"})
	require.ErrorIs(t, err, syscall.EINVAL)
}

func TestFromEnvFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "softhca.conf")
	require.NoError(t, os.WriteFile(f, []byte("# a device\naddr = 127.0.0.3\nSOFTHCA_MTU=2048\n\nport=4800\n"), 0o600))
	t.Setenv(VarConfig, f)
	t.Setenv(VarPort, "4801") // the environment overrides the file
	s, err := FromEnv()
	require.NoError(t, err)
	require.Equal(t, "127.0.0.3", s.Addr.String())
	require.Equal(t, verbs.MTU2048, s.MTU)
	require.Equal(t, uint16(4801), s.Port)

	require.NoError(t, os.WriteFile(f, []byte("addr 127.0.0.3\n"), 0o600))
	_, err = FromEnv()
	require.ErrorIs(t, err, syscall.EINVAL)
	require.Contains(t, err.Error(), f+":1")

	t.Setenv(VarConfig, filepath.Join(dir, "missing"))
	_, err = FromEnv()
	require.ErrorIs(t, err, os.ErrNotExist)
}

// FuzzParseFile: any file is settings or EINVAL, never a panic; settings
// with an address survive Env (what `softhca env` prints) and Parse.
func FuzzParseFile(f *testing.F) {
	f.Add([]byte("addr=127.0.0.1\nmtu=1024\n"))
	f.Add([]byte("# x\n\nSOFTHCA_RATE = 1G\nbusy_poll=1\n"))
	f.Add([]byte("port=\xff\n=\n"))
	f.Add([]byte("addr=::1\nport=1\npeer_port=2\ndevice=d=1\nbusy_poll=f\nrate=0.1M\nlog=2\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		vals, err := ParseFile("f", b)
		if err != nil {
			require.ErrorIs(t, err, syscall.EINVAL)
			return
		}
		s, err := Parse(vals)
		if err != nil {
			require.ErrorIs(t, err, syscall.EINVAL)
			return
		}
		if !s.Addr.IsValid() {
			return // Env needs an address (run and env refuse a device without one)
		}
		env := map[string]string{}
		for _, kv := range s.Env() {
			k, v, _ := cutEq(kv)
			env[k] = v
		}
		back, err := Parse(env)
		require.NoError(t, err, "%q", s.Env())
		require.Equal(t, s, back)
	})
}
