package pingpong

import (
	"errors"
	"fmt"
	"io"
)

// The out-of-band exchange, as rdma-core's pp_client_exch_dest and
// pp_server_exch_dest do it over one TCP connection:
//
//	client                                server
//	  address message(s)       ------>
//	                                      (connects its QP(s) to the client)
//	                           <------    address message(s)
//	  "done\0"                 ------>
//
// rc, uc and ud send one message each way; srq sends SRQMessages (256)
// each way, whatever the number of QPs. The server connects before it
// answers, so the client may send as soon as it has read the answer and
// connected in turn.
//
// rdma-core's client sends "done" as soon as it has read the answer and
// connects afterwards; softhca's connects first and sends "done" only
// when that worked. The messages are the same, but a client that cannot
// connect (the server's GID is one it cannot reach, say) closes the
// connection without "done", so that the server fails at once too
// ("Couldn't send/recv local address"), instead of waiting forever for
// a first message that will never come.

// ExchangeError is a failed exchange. Msg is rdma-core's message for the
// step that failed; Err says why. Connect failures print as rdma-core
// prints them: the failed step first ("Failed to modify QP to RTR"), then
// "Couldn't connect to remote QP" on a line of its own.
type ExchangeError struct {
	Msg string
	Err error
}

func (e *ExchangeError) Error() string {
	switch {
	case e.Err == nil:
		return e.Msg
	case e.Msg == connectMsg:
		return e.Err.Error() + "\n" + e.Msg
	}
	return e.Msg + ": " + e.Err.Error()
}

const connectMsg = "Couldn't connect to remote QP"

func (e *ExchangeError) Unwrap() error { return e.Err }

// writeMessages writes one address message per Dest.
func writeMessages(w io.Writer, ds []Dest) error {
	buf := make([]byte, 0, len(ds)*MsgSize)
	for _, d := range ds {
		m := d.Message()
		buf = append(buf, m[:]...)
	}
	_, err := w.Write(buf)
	return err
}

// readMessages reads and parses n address messages. It returns how many
// it parsed before an error.
func readMessages(r io.Reader, n int) ([]Dest, error) {
	ds := make([]Dest, 0, n)
	var m [MsgSize]byte
	for range n {
		if _, err := io.ReadFull(r, m[:]); err != nil {
			return ds, err
		}
		d, err := ParseMessage(m[:])
		if err != nil {
			return ds, err
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// ClientExchange is the client's side: it sends my (one message per
// entry), reads as many messages from the server, calls connect with
// them (if not nil), and sends "done" if that succeeded. connect's error
// is returned as it is, with the server's messages.
func ClientExchange(rw io.ReadWriter, my []Dest, connect func(remote []Dest) error) ([]Dest, error) {
	if err := writeMessages(rw, my); err != nil {
		return nil, &ExchangeError{"Couldn't send local address", err}
	}
	remote, err := readMessages(rw, len(my))
	if err != nil {
		if len(my) > 1 {
			return nil, &ExchangeError{fmt.Sprintf("Couldn't read remote address [%d]", len(remote)), eofIsUnexpected(err)}
		}
		return nil, &ExchangeError{"Couldn't read/write remote address", eofIsUnexpected(err)}
	}
	if connect != nil {
		if err := connect(remote); err != nil {
			return remote, err
		}
	}
	if _, err := rw.Write(Done[:]); err != nil {
		return nil, &ExchangeError{"Couldn't read/write remote address", err}
	}
	return remote, nil
}

// ServerExchange is the server's side: it reads len(my) messages from the
// client, calls connect with them (a failure ends the exchange without an
// answer, as rdma-core does), sends my, and waits for "done".
func ServerExchange(rw io.ReadWriter, my []Dest, connect func(remote []Dest) error) ([]Dest, error) {
	remote, err := readMessages(rw, len(my))
	if err != nil {
		if len(my) > 1 {
			return nil, &ExchangeError{fmt.Sprintf("Couldn't read remote address [%d]", len(remote)), eofIsUnexpected(err)}
		}
		return nil, &ExchangeError{"Couldn't read remote address", eofIsUnexpected(err)}
	}
	if err := connect(remote); err != nil {
		return nil, &ExchangeError{connectMsg, err}
	}
	if err := writeMessages(rw, my); err != nil {
		return nil, &ExchangeError{"Couldn't send/recv local address", err}
	}
	var done [len(Done)]byte
	if _, err := io.ReadFull(rw, done[:]); err != nil {
		return nil, &ExchangeError{"Couldn't send/recv local address", eofIsUnexpected(err)}
	}
	if done != Done {
		return nil, &ExchangeError{"Couldn't send/recv local address", fmt.Errorf("got %q where the client sends \"done\\x00\"", done[:])}
	}
	return remote, nil
}

// eofIsUnexpected says that the peer closed the connection: the usual
// reason is that it failed to connect its QP and gave up.
func eofIsUnexpected(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("the peer closed the connection (see its messages)")
	}
	return err
}
