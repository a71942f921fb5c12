#!/bin/bash
# The drop-in library's overhead: perftest's unmodified ib_write_bw and
# ib_send_lat through build/libibverbs.so.1 against softhca perf doing the
# same tests in Go, alternated, ROUNDS times (default 5), both sides
# polling the same way: SOFTHCA_BUSY_POLL (default 1, the library's
# default; perf reads it too). Server 127.0.0.1, client 127.0.0.2.
# BW_ITERS (default perftest's 5000) and LAT_ITERS (1000) set -n.
#
#   make libibverbs && go build -o softhca ./cmd/softhca
#   docs/scripts/libibverbs-overhead.sh
set -u
export SOFTHCA_BUSY_POLL=${SOFTHCA_BUSY_POLL:-1}
export LD_LIBRARY_PATH=
lib=${SOFTHCA_LIB:-$PWD/build}
shca=${SHCA:-./softhca}
bn="-n ${BW_ITERS:-5000}"
ln="-n ${LAT_ITERS:-1000}"
# A server is ready when its TCP port listens.
listening() { while ! ss -ltn "sport = :$1" | grep -q LISTEN; do sleep 0.05; done; }
go_bw() { $shca perf write $bn -p 19001 >/dev/null 2>&1 & listening 19001; $shca perf write $bn -p 19001 127.0.0.2 2>&1 | awk '/^ 65536/{print $4}'; wait; }
lib_bw() { SOFTHCA_ADDR=127.0.0.1 LD_LIBRARY_PATH=$lib ib_write_bw $bn -x 1 -p 19002 >/dev/null 2>&1 & listening 19002; SOFTHCA_ADDR=127.0.0.2 LD_LIBRARY_PATH=$lib ib_write_bw $bn -x 1 -p 19002 127.0.0.1 2>&1 | awk '/^ 65536/{print $4}'; wait; }
go_lat() { $shca perf send_lat $ln -p 19003 >/dev/null 2>&1 & listening 19003; $shca perf send_lat $ln -p 19003 127.0.0.2 2>&1 | awk '/^ 2 /{print $6}'; wait; }
lib_lat() { SOFTHCA_ADDR=127.0.0.1 LD_LIBRARY_PATH=$lib ib_send_lat $ln -x 1 -p 19004 >/dev/null 2>&1 & listening 19004; SOFTHCA_ADDR=127.0.0.2 LD_LIBRARY_PATH=$lib ib_send_lat $ln -x 1 -p 19004 127.0.0.1 2>&1 | awk '/^ 2 /{print $6}'; wait; }
echo "SOFTHCA_BUSY_POLL=$SOFTHCA_BUSY_POLL"
for i in $(seq 1 "${ROUNDS:-5}"); do
	echo "round $i write_bw MB/s: go $(go_bw) lib $(lib_bw)"
	echo "round $i send_lat t_avg us: go $(go_lat) lib $(lib_lat)"
done
