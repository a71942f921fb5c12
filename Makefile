# The interop harness: softhca against Linux rdma_rxe in a qemu guest (needs
# root; see interop/README.md).
.PHONY: interop
interop:
	go test -tags interop -count=1 -timeout 30m ./interop/...

# The drop-in libibverbs.so.1 (libibverbs/; needs gcc and libibverbs-dev):
# build/libibverbs.so.1, which `softhca run` puts in front of the system's.
.PHONY: libibverbs
libibverbs:
	CGO_ENABLED=1 go build -tags libibverbs -buildmode=c-shared \
		-ldflags "-extldflags '-Wl,--version-script=$(CURDIR)/libibverbs/libibverbs.map -Wl,-soname,libibverbs.so.1'" \
		-o build/libibverbs.so.1 ./libibverbs
	rm -f build/libibverbs.so.h
