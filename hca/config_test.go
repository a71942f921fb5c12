package hca_test

import (
	"math"
	"syscall"
	"testing"
	"time"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link/pipe"
	"github.com/stretchr/testify/require"
)

// TestOpenRefusesBadCongestion: a rate that is not a number, infinite or
// negative, a device rate out of range, a negative burst or interval:
// Open fails with EINVAL and opens nothing.
func TestOpenRefusesBadCongestion(t *testing.T) {
	for name, c := range map[string]hca.Congestion{
		"LineRate NaN":           {LineRate: math.NaN()},
		"MinRate negative":       {MinRate: -1},
		"HyperIncrease infinite": {HyperIncrease: math.Inf(1)},
		"AdditiveIncrease NaN":   {AdditiveIncrease: math.NaN()},
		"DeviceRate NaN":         {DeviceRate: math.NaN()},
		"DeviceRate negative":    {DeviceRate: -200e6},
		"DeviceRate too low":     {DeviceRate: 999},
		"DeviceRate too high":    {DeviceRate: 2e13},
		"RateBurst negative":     {RateBurst: -1},
		"CNPInterval negative":   {CNPInterval: -time.Microsecond},
	} {
		t.Run(name, func(t *testing.T) {
			la, lb := pipe.New(pipe.Config{})
			defer lb.Close()
			d, err := hca.Open(hca.Config{Link: la, Congestion: c})
			require.ErrorIs(t, err, syscall.EINVAL)
			require.Nil(t, d)
			require.NoError(t, la.Close(), "the link is still the caller's")
		})
	}
	la, lb := pipe.New(pipe.Config{})
	defer lb.Close()
	d, err := hca.Open(hca.Config{Link: la, Congestion: hca.Congestion{DeviceRate: 200e6, DeviceWindow: -1}})
	require.NoError(t, err, "a device rate in range, no device window")
	require.NoError(t, d.Close())
}

// TestOpenBusyPollNeedsPoller: BusyPoll on a link the device's polls
// cannot read (link/pipe is not a link.Poller) is refused with EINVAL:
// accepted, an application spinning on Poll would only starve the
// goroutines that read the link.
func TestOpenBusyPollNeedsPoller(t *testing.T) {
	la, lb := pipe.New(pipe.Config{})
	defer lb.Close()
	d, err := hca.Open(hca.Config{Link: la, BusyPoll: true})
	require.ErrorIs(t, err, syscall.EINVAL)
	require.ErrorContains(t, err, "link.Poller")
	require.Nil(t, d)
	d, err = hca.Open(hca.Config{BusyPoll: true})
	require.NoError(t, err, "without a link there is nothing to poll: BusyPoll is moot")
	require.NoError(t, d.Close())
}
