// Package control is the softhca daemon's control API: the protocol
// spoken on its Unix socket, a server that runs it over a net.Listener
// and a client for the command-line tools (devinfo, res, stat, status,
// trace).
//
// # Protocol
//
// A connection carries JSON objects, one per line (newline-delimited
// JSON), in both directions. The client sends a request; the server
// answers each request with exactly one response, in order, except for
// the "trace" operation, whose answer is a stream of responses that ends
// only when the client closes the connection (or the daemon stops).
//
//	-> {"id":1,"op":"status"}
//	<- {"id":1,"result":{...}}
//	-> {"id":2,"op":"res","object":"qp"}
//	<- {"id":2,"result":[...]}
//	-> {"id":3,"op":"res","object":"ah"}
//	<- {"id":3,"error":{"errno":"EINVAL","code":22,"message":"res: unknown object \"ah\" (want pd, mr, cq, qp or srq)"}}
//
// The operations are listed in [Ops]; docs/control-api.md documents each
// with its result. A request is at most [MaxRequest] bytes including its
// newline; a longer one is answered with E2BIG and the connection is
// closed, as it is after a line that is not a JSON object (EINVAL,
// nothing else can be trusted on that connection). A request with an
// unknown field, operation or object, or a field the operation does not
// take, is answered with EINVAL and the connection stays open. A client
// that sends no complete request within the idle timeout is disconnected
// (ETIMEDOUT, sent before the close).
//
// # Goroutines
//
// Server.Serve runs one goroutine per accepted connection (at most
// Server.MaxConns at once; more are answered EBUSY and closed). Handler
// methods are called from those goroutines, concurrently.
package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
)

// MaxRequest is the longest request line the server reads, newline
// included.
const MaxRequest = 64 << 10

// Op is a control operation.
type Op string

// The operations.
const (
	OpStatus  Op = "status"  // the daemon: version, pid, addresses, uptime, object counts
	OpDevinfo Op = "devinfo" // the device and port attributes and the GID table (ibv_devinfo -v)
	OpRes     Op = "res"     // the objects of one kind (Object: pd, mr, cq, qp, srq)
	OpStat    Op = "stat"    // the device's counters, drops by reason
	OpTrace   Op = "trace"   // a stream of the packets the device sends and receives
)

// Ops lists the operations in the order the documentation gives them.
var Ops = []Op{OpStatus, OpDevinfo, OpRes, OpStat, OpTrace}

// Objects are what OpRes lists.
var Objects = []string{"pd", "mr", "cq", "qp", "srq"}

// Request is one request.
type Request struct {
	// ID is echoed in the response (any number the client chooses).
	ID uint64 `json:"id"`
	Op Op     `json:"op"`
	// Object is the kind of object OpRes lists; only OpRes takes it.
	Object string `json:"object,omitempty"`
	// Recent asks OpTrace to send first the packets of the recent past
	// the daemon still holds (at most this many), then live ones.
	Recent int `json:"recent,omitempty"`
}

// Response is one response: Result or Error (or, in a trace stream,
// Packet).
type Response struct {
	ID     uint64          `json:"id"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
	// Packet is one traced packet (OpTrace).
	Packet *Packet `json:"packet,omitempty"`
	// Lost counts packets the stream left out since the last response,
	// because the client read more slowly than the device moved them.
	Lost uint64 `json:"lost,omitempty"`
}

// Error is a failed request: the errno name and number (as errno(3)
// names them) and a message that says what was wrong.
type Error struct {
	Errno   string `json:"errno"`
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Message }

// Unwrap makes errors.Is(err, syscall.EINVAL) hold for an Error that
// carries EINVAL.
func (e *Error) Unwrap() error {
	if e.Code > 0 {
		return syscall.Errno(e.Code)
	}
	return nil
}

// Errorf makes an Error with errno and a formatted message.
func Errorf(errno syscall.Errno, format string, args ...any) *Error {
	return &Error{Errno: ErrnoName(errno), Code: int(errno), Message: fmt.Sprintf(format, args...)}
}

// toError turns a handler's error into an Error: its errno where it
// wraps one, else EIO.
func toError(err error) *Error {
	var ce *Error
	if errors.As(err, &ce) {
		return ce
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		errno = syscall.EIO
	}
	return &Error{Errno: ErrnoName(errno), Code: int(errno), Message: err.Error()}
}

// errnoNames are the errno names the daemon answers with.
var errnoNames = map[syscall.Errno]string{
	syscall.EINVAL: "EINVAL", syscall.ENOENT: "ENOENT", syscall.E2BIG: "E2BIG", syscall.EBUSY: "EBUSY",
	syscall.ETIMEDOUT: "ETIMEDOUT", syscall.EIO: "EIO", syscall.ENOMEM: "ENOMEM", syscall.EAGAIN: "EAGAIN",
	syscall.EOPNOTSUPP: "EOPNOTSUPP", syscall.ESHUTDOWN: "ESHUTDOWN", syscall.EPERM: "EPERM",
}

// ErrnoName returns errno's symbolic name ("EINVAL"), or "errno N".
func ErrnoName(e syscall.Errno) string {
	if n, ok := errnoNames[e]; ok {
		return n
	}
	return fmt.Sprintf("errno %d", int(e))
}

// Packet is one packet in a trace stream.
type Packet struct {
	// Time is when the device sent or received it, in nanoseconds since
	// the Unix epoch.
	Time int64 `json:"time_ns"`
	// Dir is "sent" or "received".
	Dir string `json:"dir"`
	// Src and Dst are the IP addresses and UDP ports ("10.0.0.1:4791").
	Src string `json:"src"`
	Dst string `json:"dst"`
	// TrafficClass is the IP traffic class (DSCP and ECN) and HopLimit
	// the TTL or hop limit.
	TrafficClass uint8 `json:"traffic_class"`
	HopLimit     uint8 `json:"hop_limit"`
	// Summary is the packet in `softhca decode`'s line format.
	Summary string `json:"summary"`
	// Data is the RoCEv2 packet, from the BTH to the ICRC (the UDP
	// payload; base64 in JSON).
	Data []byte `json:"data"`
}

// ParseRequest parses and checks one request line (without its newline).
// The error is an *Error with EINVAL that says what is wrong.
func ParseRequest(line []byte) (Request, error) {
	var r Request
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return r, Errorf(syscall.EINVAL, "a request is a JSON object on one line, like {\"id\":1,\"op\":\"status\"}")
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Request{}, Errorf(syscall.EINVAL, "bad request: %s", jsonProblem(err))
	}
	if dec.More() {
		return Request{}, Errorf(syscall.EINVAL, "bad request: more than one JSON value on the line")
	}
	if err := r.check(); err != nil {
		return r, err
	}
	return r, nil
}

// jsonProblem says what encoding/json found wrong, without Go type names.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("field %q: %s is not a %s", te.Field, te.Value, jsonKind(te.Type.Kind().String()))
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func jsonKind(k string) string {
	switch {
	case strings.HasPrefix(k, "int"), strings.HasPrefix(k, "uint"):
		return "number"
	case k == "struct":
		return "object"
	}
	return k
}

// check validates the request's fields for its operation.
func (r *Request) check() error {
	if r.Op == "" {
		return Errorf(syscall.EINVAL, "bad request: no \"op\" (one of %s)", opList())
	}
	if !slices.Contains(Ops, r.Op) {
		return Errorf(syscall.EINVAL, "unknown op %q (one of %s)", r.Op, opList())
	}
	if r.Op == OpRes {
		if r.Object == "" {
			return Errorf(syscall.EINVAL, "res: no \"object\" (one of %s)", strings.Join(Objects, ", "))
		}
		if !slices.Contains(Objects, r.Object) {
			return Errorf(syscall.EINVAL, "res: unknown object %q (one of %s)", r.Object, strings.Join(Objects, ", "))
		}
	} else if r.Object != "" {
		return Errorf(syscall.EINVAL, "%s takes no \"object\"", r.Op)
	}
	if r.Recent != 0 && r.Op != OpTrace {
		return Errorf(syscall.EINVAL, "%s takes no \"recent\"", r.Op)
	}
	if r.Recent < 0 {
		return Errorf(syscall.EINVAL, "trace: \"recent\" is %d, want 0 or more", r.Recent)
	}
	return nil
}

func opList() string {
	s := make([]string, len(Ops))
	for i, o := range Ops {
		s[i] = string(o)
	}
	return strings.Join(s, ", ")
}
