#!/bin/bash
# alternate: Go path (softhca perf) vs the library (perftest binaries)
export LD_LIBRARY_PATH=
lib=${SOFTHCA_LIB:-$PWD/build}
go_bw() { ${SHCA:-./softhca} perf write -p 19001 >/dev/null 2>&1 & sleep 1; ${SHCA:-./softhca} perf write -p 19001 127.0.0.2 2>&1 | awk '/^ 65536/{print $4}'; wait; }
lib_bw() { SOFTHCA_ADDR=127.0.0.1 LD_LIBRARY_PATH=$lib ib_write_bw -x 1 -p 19002 >/dev/null 2>&1 & sleep 1; SOFTHCA_ADDR=127.0.0.2 LD_LIBRARY_PATH=$lib ib_write_bw -x 1 -p 19002 127.0.0.1 2>&1 | awk '/^ 65536/{print $4}'; wait; }
go_lat() { ${SHCA:-./softhca} perf send_lat -p 19003 >/dev/null 2>&1 & sleep 1; ${SHCA:-./softhca} perf send_lat -p 19003 127.0.0.2 2>&1 | awk '/^ 2 /{print $6}'; wait; }
lib_lat() { SOFTHCA_ADDR=127.0.0.1 LD_LIBRARY_PATH=$lib ib_send_lat -x 1 -p 19004 >/dev/null 2>&1 & sleep 1; SOFTHCA_ADDR=127.0.0.2 LD_LIBRARY_PATH=$lib ib_send_lat -x 1 -p 19004 127.0.0.1 2>&1 | awk '/^ 2 /{print $6}'; wait; }
for i in 1 2 3; do
  echo "round $i write_bw MB/s: go $(go_bw) lib $(lib_bw)"
  echo "round $i send_lat t_avg us: go $(go_lat) lib $(lib_lat)"
done
