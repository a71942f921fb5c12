package pingpong

import (
	"encoding/json"
	"os"

	"github.com/softhca/softhca/hca"
)

// StatsJSON is the device's transport counters as a flat JSON object of
// counter names and numbers, the format interop's harness reads from
// SOFTHCA_STATS: rx_packets, tx_packets, the transport and congestion
// control events, and every
// non-zero drop counter under its name (hca.Stats.DropNames).
func StatsJSON(st hca.Stats) []byte {
	m := map[string]uint64{
		"rx_packets":          st.RxPackets,
		"tx_packets":          st.TxPackets,
		"retransmits":         st.Retransmits,
		"retry_timeouts":      st.RetryTimeouts,
		"rnr_naks_sent":       st.RNRNAKsSent,
		"rnr_naks_received":   st.RNRNAKsReceived,
		"seq_naks_sent":       st.SeqNAKsSent,
		"seq_naks_received":   st.SeqNAKsReceived,
		"acks_sent":           st.AcksSent,
		"duplicates_answered": st.DuplicatesAnswered,
		// Congestion control.
		"retransmitted_packets": st.RetransmittedPackets,
		"window_increases":      st.WindowIncreases,
		"window_cuts":           st.WindowCuts,
		"rate_cuts":             st.RateCuts,
		"rate_increases":        st.RateIncreases,
		"rate_unpaced":          st.RateUnpaced,
		"pacer_waits":           st.PacerWaits,
		"device_waits":          st.DeviceWaits,
		"device_rate_waits":     st.DeviceRateWaits,
		"ce_received":           st.CEReceived,
		"cnps_sent":             st.CNPsSent,
		"loss_cnps":             st.LossCNPs,
		"cnps_received":         st.CNPsReceived,
	}
	for k, v := range st.DropNames() {
		m[k] = v
	}
	b, _ := json.Marshal(m) // a map of numbers always marshals
	return b
}

// writeStats writes the device's counters to Config.StatsFile, if set,
// once the device is closed (so the counts are final). A failure to write
// them does not fail the run.
func (s *session) writeStats() {
	if s.cfg.StatsFile == "" || s.statsDev == nil {
		return
	}
	_ = os.WriteFile(s.cfg.StatsFile, StatsJSON(s.statsDev.TransportStats()), 0o644)
}
