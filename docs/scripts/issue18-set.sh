#!/bin/bash
# Issue 18's figures in alternated rounds: the raw UDP GSO/GRO baseline
# once a round, then for each binary the RC WRITE 64 KiB, RC SEND 64 B
# (two Ps and one), channel and busy-poll ping-pong and the raw exchange
# of the ping-pong's 4 datagrams; and, for the binaries that have it,
# RC SEND 64 B over 1 and 16 QPs.
#
#   usage: docs/scripts/issue18-set.sh ROUNDS RAW-BINARY HCA-BINARY...
#
# RAW-BINARY is a link/udp test binary (go test -c ./link/udp), each
# HCA-BINARY an hca test binary (go test -c ./hca) of the commit to
# measure; build older commits in a git worktree. Run it from hca/ on an
# otherwise idle machine. Its output: one line per benchmark, prefixed
# by the binary's name ("raw" for the baseline; "NAME cpu1" for one P).
set -euo pipefail
rounds=$1 raw=$2
shift 2
for r in $(seq 1 "$rounds"); do
	echo "== round $r $(date -u +%H:%M:%S)"
	nice -n -20 "$raw" -test.run '^$' -test.bench 'BenchmarkRawUDPBaseline$' -test.benchtime 2s 2>&1 | grep -E '^Benchmark' | sed 's/^/raw /'
	for bin in "$@"; do
		v=$(basename "$bin" .test)
		nice -n -20 "$bin" -test.run '^$' -test.bench 'BenchmarkRCWrite64K/gso|BenchmarkRCSend64$|BenchmarkRCPingPong64$|BenchmarkRCPingPong64BusyPoll$|BenchmarkUDPPingPongAck64$' -test.benchtime 2s 2>&1 | grep -E '^Benchmark' | sed "s/^/$v /"
		nice -n -20 "$bin" -test.run '^$' -test.bench 'BenchmarkRCSend64$' -test.benchtime 2s -test.cpu 1 2>&1 | grep -E '^Benchmark' | sed "s/^/$v cpu1 /"
		if "$bin" -test.list 'BenchmarkRCSend64QPs' | grep -q .; then
			nice -n -20 "$bin" -test.run '^$' -test.bench 'BenchmarkRCSend64QPs' -test.benchtime 2s 2>&1 | grep -E '^Benchmark' | sed "s/^/$v /"
		fi
	done
done
