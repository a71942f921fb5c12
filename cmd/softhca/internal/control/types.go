package control

// The results of the operations. Field names follow iproute2's
// `rdma -j resource show` and `rdma -j statistic` where those have the
// field ("lqpn", "rq-psn", "pdn"), and are snake_case otherwise.

// Status is OpStatus's result.
type Status struct {
	Version string `json:"version"`
	PID     int    `json:"pid"`
	// Started is when the daemon started (RFC 3339); Uptime is how long
	// ago, in seconds.
	Started string  `json:"started"`
	Uptime  float64 `json:"uptime_s"`
	Device  string  `json:"ifname"`
	// Listen is the UDP address the device sends from and receives on
	// (on a TAP interface: its first address, port 4791).
	Listen string `json:"listen"`
	// Tap is the TAP interface the device is a host on, and MAC its
	// Ethernet address there; both empty for a device on UDP.
	Tap  string   `json:"tap,omitempty"`
	MAC  string   `json:"mac,omitempty"`
	GIDs []string `json:"gids"`
	// ActiveMTU is the port's active MTU in bytes.
	ActiveMTU int    `json:"active_mtu"`
	Control   string `json:"control"`
	HTTP      string `json:"http,omitempty"`
	Metrics   string `json:"metrics,omitempty"`
	// Services are the responders the daemon runs for peers.
	Services []Service `json:"services"`
	// Regions are the named target memory regions peers may READ,
	// WRITE and ATOMIC into.
	Regions []Region `json:"regions"`
	// Objects counts the device's live objects by kind (pd, mr, cq, qp,
	// srq).
	Objects map[string]int `json:"objects"`
	// RxPackets and TxPackets are the device's packet counts.
	RxPackets uint64 `json:"rx_packets"`
	TxPackets uint64 `json:"tx_packets"`
	Dropped   uint64 `json:"dropped"`
}

// Service is a responder the daemon runs.
type Service struct {
	Name   string `json:"name"`
	Listen string `json:"listen"`
	// Served counts the clients it has accepted.
	Served uint64 `json:"served"`
}

// Region is a named target memory region.
type Region struct {
	Name   string `json:"name"`
	Addr   uint64 `json:"addr"`
	Length uint64 `json:"length"`
	RKey   uint32 `json:"rkey"`
	LKey   uint32 `json:"lkey"`
	PD     uint32 `json:"pdn"`
	// Access lists the access flags (local_write, remote_read,
	// remote_write, remote_atomic).
	Access []string `json:"access"`
}

// PD is a protection domain (res pd).
type PD struct {
	Device string `json:"ifname"`
	PDN    uint32 `json:"pdn"`
	Users  int    `json:"users"`
	PID    int    `json:"pid"`
	Comm   string `json:"comm"`
}

// MR is a memory region (res mr).
type MR struct {
	Device string   `json:"ifname"`
	RKey   uint32   `json:"rkey"`
	LKey   uint32   `json:"lkey"`
	Len    uint64   `json:"mrlen"`
	Addr   uint64   `json:"addr"`
	PDN    uint32   `json:"pdn"`
	Access []string `json:"access"`
	// Name is the region's name when it is a named target region.
	Name string `json:"name,omitempty"`
	PID  int    `json:"pid"`
	Comm string `json:"comm"`
}

// CQ is a completion queue (res cq).
type CQ struct {
	Device  string `json:"ifname"`
	CQN     uint32 `json:"cqn"`
	CQE     int    `json:"cqe"`
	Users   int    `json:"users"`
	Queued  int    `json:"queued"`
	Channel bool   `json:"channel"`
	Error   bool   `json:"error"`
	PID     int    `json:"pid"`
	Comm    string `json:"comm"`
}

// QP is a queue pair (res qp).
type QP struct {
	Device       string `json:"ifname"`
	Port         int    `json:"port"`
	LQPN         uint32 `json:"lqpn"`
	RQPN         uint32 `json:"rqpn"`
	Type         string `json:"type"`
	State        string `json:"state"`
	RQPSN        uint32 `json:"rq-psn"`
	SQPSN        uint32 `json:"sq-psn"`
	PathMigState string `json:"path-mig-state"`
	PDN          uint32 `json:"pdn"`
	SendCQN      uint32 `json:"send_cqn"`
	RecvCQN      uint32 `json:"recv_cqn"`
	SRQN         uint32 `json:"srqn,omitempty"`
	PathMTU      int    `json:"path_mtu,omitempty"`
	// DGID is the destination GID of a connected QP, as ibv_devinfo -v
	// prints GIDs (an IPv6 address).
	DGID string `json:"dgid,omitempty"`
	// SendQueued and RecvQueued are the work requests outstanding.
	SendQueued int `json:"sq_outstanding"`
	RecvQueued int `json:"rq_posted"`
	// The QP's own counters since it was created.
	TxPackets       uint64 `json:"tx_pkts"`
	TxBytes         uint64 `json:"tx_bytes"`
	RxPackets       uint64 `json:"rx_pkts"`
	Retransmits     uint64 `json:"retransmits"`
	RetxPackets     uint64 `json:"retransmitted_pkts"`
	RetryTimeouts   uint64 `json:"retry_timeouts"`
	RNRNAKsSent     uint64 `json:"send_rnr_err"`
	RNRNAKsReceived uint64 `json:"rcvd_rnr_err"`
	SeqNAKsSent     uint64 `json:"seq_naks_sent"`
	SeqNAKsReceived uint64 `json:"rcvd_seq_err"`
	PID             int    `json:"pid"`
	Comm            string `json:"comm"`
}

// SRQ is a shared receive queue (res srq).
type SRQ struct {
	Device string   `json:"ifname"`
	SRQN   uint32   `json:"srqn"`
	Type   string   `json:"type"` // BASIC or TM
	LQPN   []uint32 `json:"lqpn"`
	PDN    uint32   `json:"pdn"`
	MaxWR  uint32   `json:"max_wr"`
	MaxSGE uint32   `json:"max_sge"`
	Limit  uint32   `json:"srq_limit"`
	Queued int      `json:"queued"`
	CQN    uint32   `json:"cqn,omitempty"`
	PID    int      `json:"pid"`
	Comm   string   `json:"comm"`
}

// Stat is OpStat's result: the device's counters by name (rdma
// statistic's), and the drops by reason.
type Stat struct {
	Device string `json:"ifname"`
	Port   int    `json:"port"`
	// Counters are the named counters, in Names' order.
	Counters map[string]uint64 `json:"counters"`
	// Names orders Counters for display.
	Names []string `json:"names"`
	// Drops counts dropped packets by reason (only reasons that
	// dropped some).
	Drops map[string]uint64 `json:"drops"`
}
