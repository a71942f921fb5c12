package ring

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRingModel drives a Ring and a plain slice with the same random
// operations and requires them to agree.
func TestRingModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, capacity := range []int{1, 2, 3, 7, 64} {
		r := New[int](capacity)
		var model []int
		next := 0
		for step := 0; step < 20000; step++ {
			switch op := rng.IntN(10); {
			case op < 5:
				ok := r.Push(next)
				require.Equal(t, len(model) < capacity, ok)
				if ok {
					model = append(model, next)
				}
				next++
			case op < 8:
				v, ok := r.Pop()
				require.Equal(t, len(model) > 0, ok)
				if ok {
					require.Equal(t, model[0], v)
					model = model[1:]
				}
			case op < 9 && len(model) > 0:
				k := rng.IntN(len(model) + 1)
				r.Drop(k)
				model = model[k:]
			default:
				c := capacity + rng.IntN(3) - 1
				ok := r.Resize(c)
				require.Equal(t, c >= len(model), ok)
				if ok {
					capacity = c
				}
			}
			require.Equal(t, len(model), r.Len())
			require.Equal(t, capacity, r.Cap())
			require.Equal(t, capacity-len(model), r.Free())
			for i, v := range model {
				require.Equal(t, v, *r.At(i))
			}
		}
	}
}

func TestRingPushSlotAndIndex(t *testing.T) {
	r := New[int](3)
	for i := range 3 {
		s := r.PushSlot()
		require.NotNil(t, s)
		*s = i
		require.Equal(t, i, r.Index(i))
	}
	require.Nil(t, r.PushSlot())
	require.True(t, r.Full())
	_, _ = r.Pop()
	*r.PushSlot() = 3
	require.Equal(t, 0, r.Index(2), "slot of the newest value wraps to 0")
	require.Panics(t, func() { r.At(3) })
	r.Reset()
	require.Equal(t, 0, r.Len())
}
