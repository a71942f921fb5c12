package daemon

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// collector exposes the device's counters to Prometheus, read at each
// scrape (prometheus.Collector): every stat counter as
// softhca_<name>_total, the drops by reason as softhca_dropped_packets_total
// {reason=...}, and the objects and QP states as gauges. Every metric
// has the label device.
type collector struct {
	d        *Daemon
	counters map[string]*prometheus.Desc
	dropped  *prometheus.Desc
	objects  *prometheus.Desc
	qps      *prometheus.Desc
	uptime   *prometheus.Desc
}

func newCollector(d *Daemon) *collector {
	c := &collector{d: d, counters: map[string]*prometheus.Desc{}}
	labels := prometheus.Labels{"device": d.cfg.Name}
	for _, n := range statCounters(d.dev.TransportStats()) {
		if n.name == "dropped_pkts" {
			continue // by reason below
		}
		c.counters[n.name] = prometheus.NewDesc("softhca_"+n.name+"_total", n.help+".", nil, labels)
	}
	c.dropped = prometheus.NewDesc("softhca_dropped_packets_total", "Packets dropped, by reason.", []string{"reason"}, labels)
	c.objects = prometheus.NewDesc("softhca_objects", "Live verbs objects, by kind (pd, mr, cq, qp, srq).", []string{"kind"}, labels)
	c.qps = prometheus.NewDesc("softhca_qps", "Queue pairs, by type and state.", []string{"type", "state"}, labels)
	c.uptime = prometheus.NewDesc("softhca_uptime_seconds", "Seconds since the daemon started.", nil, labels)
	return c
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.counters {
		ch <- d
	}
	ch <- c.dropped
	ch <- c.objects
	ch <- c.qps
	ch <- c.uptime
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.d.dev.TransportStats()
	for _, n := range statCounters(st) {
		if desc, ok := c.counters[n.name]; ok {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(n.value))
		}
	}
	// Every reason, dropped or not yet, so that rates are defined from
	// the first scrape on.
	drops := st.DropCounts()
	for reason, v := range drops {
		ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(v), reason)
	}
	res := c.d.dev.Resources()
	for kind, n := range map[string]int{"pd": len(res.PDs), "mr": len(res.MRs), "cq": len(res.CQs), "qp": len(res.QPs), "srq": len(res.SRQs)} {
		ch <- prometheus.MustNewConstMetric(c.objects, prometheus.GaugeValue, float64(n), kind)
	}
	type key struct{ typ, state string }
	qps := map[key]int{}
	for _, q := range res.QPs {
		qps[key{q.Type.String(), q.Attr.QPState.String()}]++
	}
	for k, n := range qps {
		ch <- prometheus.MustNewConstMetric(c.qps, prometheus.GaugeValue, float64(n), k.typ, k.state)
	}
	ch <- prometheus.MustNewConstMetric(c.uptime, prometheus.GaugeValue, c.d.now().Sub(c.d.started).Seconds())
}

// metricsHandler serves the exposition of the device's metrics (and the
// Go runtime's, as every Prometheus client does).
func (d *Daemon) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(d))
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// startMetrics serves /metrics on addr.
func (d *Daemon) startMetrics(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", d.metricsHandler())
	d.metSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	d.metAddr = ln.Addr().String()
	d.goServe("metrics", func() error { return d.metSrv.Serve(ln) })
	return nil
}
