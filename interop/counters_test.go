package interop

import "testing"

func TestParseCounterLines(t *testing.T) {
	c, err := parseCounterLines([]byte(
		"/sys/class/infiniband/rxe0/ports/1/hw_counters/rcvd_pkts:3430\n" +
			"/sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts:12\n" +
			"/sys/class/infiniband/rxe0/ports/1/hw_counters/lifespan:12\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c["rcvd_pkts"] != 3430 || c["sent_pkts"] != 12 || len(c) != 3 {
		t.Errorf("parsed %v, want rcvd_pkts=3430 sent_pkts=12 lifespan=12", c)
	}
	d := c.Sub(Counters{"rcvd_pkts": 3000, "sent_pkts": 12})
	if got, want := d.String(), "rcvd_pkts=430"; got != want {
		t.Errorf("difference %q, want %q (zero counters and lifespan left out)", got, want)
	}
	if _, err := parseCounterLines([]byte("x/rcvd_pkts:many\n")); err == nil {
		t.Error("a non-numeric counter parsed without error")
	}
}
