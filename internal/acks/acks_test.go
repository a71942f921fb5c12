package acks

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWaitForAcks(t *testing.T) {
	var c Counter
	require.NoError(t, c.Wait(context.Background()), "nothing reported")
	c.Reported()
	c.Reported()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, c.Wait(ctx), context.Canceled)

	done := make(chan error, 1)
	go func() { done <- c.Wait(context.Background()) }()
	c.Acked(1)
	require.Equal(t, uint64(1), c.Outstanding())
	c.Acked(5) // clamped
	require.NoError(t, <-done)
	require.Equal(t, uint64(0), c.Outstanding())
	c.Reported()
	require.Equal(t, uint64(1), c.Outstanding(), "over-acknowledgement does not pre-pay later events")
}
