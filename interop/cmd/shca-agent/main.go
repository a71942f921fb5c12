// Command shca-agent is the interop harness's guest agent: it listens on a
// TCP port in the guest and runs the commands the host sends (see package
// interop/agent). The guest's /init starts it from the 9p share; the host
// builds it (CGO_ENABLED=0, static) for every run.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"

	"github.com/softhca/softhca/interop/agent"
)

func main() {
	addr := flag.String("listen", fmt.Sprintf(":%d", agent.DefaultPort), "TCP address to listen on")
	quiet := flag.Bool("q", false, "do not log commands")
	flag.Parse()
	log.SetFlags(log.Lmicroseconds)
	log.SetPrefix("shca-agent: ")
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "shca-agent: listening on %s\n", l.Addr())
	logf := agent.Logger()
	if *quiet {
		logf = nil
	}
	if err := agent.Serve(l, logf); err != nil {
		log.Fatal(err)
	}
}
