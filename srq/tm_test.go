package srq

import (
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/transport"
	"github.com/softhca/softhca/verbs"
)

// nullCQ takes completions and drops them.
type nullCQ struct{}

func (nullCQ) Push(*verbs.WC, bool) bool                          { return true }
func (nullCQ) PushRelease(*verbs.WC, bool, Releaser, uint32) bool { return true }

// TestTMCreateLimits: a tag-matching SRQ's limits, the device's tm_caps
// max_sge included: more scatter elements than a rendezvous READ can keep
// would cut READs short, so such a device configuration is refused.
func TestTMCreateLimits(t *testing.T) {
	ok := TMConfig{MaxNumTags: 4, MaxOps: 4, MaxSGE: transport.MaxTagSGE, DevMaxNumTags: 8, DevMaxOps: 8, CQ: nullCQ{}}
	bad := map[string]func(c *TMConfig){
		"no CQ":                                  func(c *TMConfig) { c.CQ = nil },
		"no tags":                                func(c *TMConfig) { c.MaxNumTags = 0 },
		"tags above the cap":                     func(c *TMConfig) { c.MaxNumTags = 9 },
		"no ops":                                 func(c *TMConfig) { c.MaxOps = 0 },
		"ops above the cap":                      func(c *TMConfig) { c.MaxOps = 9 },
		"device max_sge 0":                       func(c *TMConfig) { c.MaxSGE = 0 },
		"device max_sge above what a READ keeps": func(c *TMConfig) { c.MaxSGE = transport.MaxTagSGE + 1 },
	}
	attr := verbs.SRQAttr{MaxWR: 1, MaxSGE: 1}
	for name, f := range bad {
		c := ok
		f(&c)
		_, err := New(Config{Attr: attr, DevMaxWR: 1, DevMaxSGE: 1, TM: &c})
		require.True(t, errors.Is(err, syscall.EINVAL), "%s: %v", name, err)
	}
	s, err := New(Config{Attr: attr, DevMaxWR: 1, DevMaxSGE: 1, TM: &ok})
	require.NoError(t, err)
	require.True(t, s.IsTM())
}
