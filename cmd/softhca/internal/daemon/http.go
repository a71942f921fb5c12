package daemon

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/softhca/softhca/cmd/softhca/internal/control"
)

//go:embed web
var webFiles embed.FS

// startHTTP serves the web page and its JSON on addr:
//
//	/                the page (web/index.html)
//	/api/status      control.Status
//	/api/stat        control.Stat
//	/api/res/{kind}  the objects of a kind (pd, mr, cq, qp, srq)
//	/api/trace       the packet stream as server-sent events, one
//	                 control.Packet per "packet" event (?recent=N first)
func (d *Daemon) startHTTP(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--http %s: %w", addr, err)
	}
	d.httpSrv = &http.Server{Handler: d.httpHandler(), ReadHeaderTimeout: 10 * time.Second}
	d.httpAddr = ln.Addr().String()
	d.goServe("http", func() error { return d.httpSrv.Serve(ln) })
	return nil
}

func (d *Daemon) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		b, err := webFiles.ReadFile("web/index.html")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(b)
	})
	mux.HandleFunc("GET /api/status", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, d.Status()) })
	mux.HandleFunc("GET /api/stat", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, d.Stat()) })
	mux.HandleFunc("GET /api/res/{kind}", func(w http.ResponseWriter, r *http.Request) {
		kind := r.PathValue("kind")
		if !slices.Contains(control.Objects, kind) {
			http.Error(w, fmt.Sprintf("unknown object %q (one of pd, mr, cq, qp, srq)", kind), http.StatusNotFound)
			return
		}
		v, err := d.Res(kind)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, v)
	})
	mux.HandleFunc("GET /api/trace", d.serveTraceSSE)
	return hostCheck(mux)
}

// hostCheck refuses requests whose Host is a name other than localhost
// or this machine's: a web site the user visits could otherwise point
// its own name at 127.0.0.1 (DNS rebinding) and read the API (the
// regions' addresses and rkeys) through the user's browser. An IP
// address as Host is what a user types (or a script uses) and passes.
func hostCheck(next http.Handler) http.Handler {
	hostname, _ := os.Hostname()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
		_, ipErr := netip.ParseAddr(host)
		if ipErr != nil && !strings.EqualFold(host, "localhost") && (hostname == "" || !strings.EqualFold(host, hostname)) {
			http.Error(w, fmt.Sprintf("Host %q is not this machine: open the page by its IP address or localhost", r.Host), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// maxSSEStreams bounds the web page's packet streams open at once.
const maxSSEStreams = 16

// sseSink writes a trace stream as server-sent events: one "packet"
// event per packet (the control API's Packet, with "lost"), sent when
// the stream is about to wait (the ResponseWriter buffers until then).
type sseSink struct {
	w  http.ResponseWriter
	fl http.Flusher
}

func (s sseSink) Packet(p *control.Packet, lost uint64) error {
	b, err := json.Marshal(struct {
		*control.Packet
		Lost uint64 `json:"lost,omitempty"`
	}{p, lost})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(s.w, "event: packet\ndata: %s\n\n", b)
	return err
}

func (s sseSink) Flush() error {
	s.fl.Flush()
	return nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

// serveTraceSSE streams packets as server-sent events until the client
// leaves or the server shuts down.
func (d *Daemon) serveTraceSSE(w http.ResponseWriter, r *http.Request) {
	// Each stream holds a goroutine and a batch buffer for as long as
	// its client stays: bounded, as the control socket's connections are.
	if d.sseStreams.Add(1) > maxSSEStreams {
		d.sseStreams.Add(-1)
		http.Error(w, fmt.Sprintf("%d packet streams are open already; close a page and retry", maxSSEStreams), http.StatusServiceUnavailable)
		return
	}
	defer d.sseStreams.Add(-1)
	recent := 0
	if s := r.URL.Query().Get("recent"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			http.Error(w, fmt.Sprintf("recent=%q: want a number of packets, 0 or more", s), http.StatusBadRequest)
			return
		}
		recent = n
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	// A stream outlives the server's write timeout by design; Shutdown
	// does not wait for it (the request context ends with the server's
	// base context only on Close), so it watches the daemon's stop too.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(d.stopCtx, cancel)
	defer stop()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	err := (&api{d: d}).Trace(ctx, control.Request{Op: control.OpTrace, Recent: recent}, sseSink{w, fl})
	var ce *control.Error
	if errors.As(err, &ce) {
		b, _ := json.Marshal(ce.Message) // a JSON string: one line, whatever the message holds
		fmt.Fprintf(w, "event: error\ndata: %s\n\n", b)
		fl.Flush()
	}
}
