#!/bin/bash
# Regenerates docs/conformance.md: the conformance suite on softhca's Go
# API, on softhca's drop-in libibverbs.so.1 (through the verbs agent), and
# on Linux rxe (the JSON report the interop run leaves in its directory),
# merged side by side.
#
#   make libibverbs && go build -buildvcs=auto -o softhca ./cmd/softhca   (the reports name its commit)
#   SOFTHCA_INTEROP_DIR=/tmp/i go test -tags interop -run 'TestInterop/conformance' ./interop/
#   docs/scripts/conformance-report.sh /tmp/i/conformance-rxe.json
set -eu
if [ $# -ne 1 ] || [ ! -f "$1" ]; then
	echo "usage: $0 RXE-REPORT.json (from an interop run: \$SOFTHCA_INTEROP_DIR/conformance-rxe.json)" >&2
	exit 2
fi
rxe=$1
shca=${SHCA:-./softhca}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# A run whose cases fail still writes its report; the merged document
# shows the failures.
"$shca" conformance -report "$out/go.json" >/dev/null || true
"$shca" conformance --target rdma:softhca0 --lib build -report "$out/lib.json" >/dev/null || true
"$shca" conformance report -o docs/conformance.md "$out/go.json" "$out/lib.json" "$rxe"
echo "wrote docs/conformance.md"
