# The interop harness: softhca against Linux rdma_rxe in a qemu guest (needs
# root; see interop/README.md).
.PHONY: interop
interop:
	go test -tags interop -count=1 -timeout 30m ./interop/...
