// Package layers adapts softhca's RoCEv2 codec (package wire) to gopacket,
// so that captures, dissectors and test tools see the InfiniBand transport
// inside UDP port 4791 as gopacket layers:
//
//	Ethernet / IPv4 or IPv6 / UDP / BTH / Payload
//
// BTH is a single layer carrying the Base Transport Header, every extension
// header its opcode calls for (DETH, RETH, AETH, AtomicETH, ImmDt, ...),
// and the pad and the ICRC after the payload. One layer rather than one per
// extension header because which headers follow the BTH is decided by the
// opcode alone, and a gopacket decoder for, say, the RETH could not know
// whether an ImmDt follows it. The layer wraps wire.ParseTransport and
// wire.Headers.Encode; it adds no wire knowledge of its own.
//
// Importing the package registers LayerTypeBTH (layer type number 1791) and
// the UDP port 4791 with gopacket, so gopacket.NewPacket decodes RoCEv2
// frames without further setup.
//
// # The ICRC
//
// The invariant CRC covers the IP and UDP headers that precede the BTH, so
// the layer needs them to check or compute it:
//
//   - Decoding with gopacket.NewPacket checks the ICRC against the IPv4 or
//     IPv6 and UDP layers decoded just before the BTH and records the
//     result in BTH.ICRCStatus. VerifyICRC does the same for a packet after
//     the fact.
//   - With a DecodingLayerParser, call BTH.CheckICRC with the parser's IP
//     and UDP layers after DecodeLayers.
//   - SerializeTo with SerializeOptions.ComputeChecksums computes the ICRC
//     from the IP and UDP layers given to SetNetworkLayerForICRC (as
//     gopacket's UDP layer computes its checksum from the layer given to
//     SetNetworkLayerForChecksum). gopacket serialises the innermost layer
//     first, so the ICRC is computed from those layers' fields, not from
//     their bytes, which do not exist yet; the lengths are the ones
//     FixLengths would write.
//
// Note that gopacket's UDP layer computes a UDP checksum when
// ComputeChecksums is set, whereas RoCEv2 senders send 0 (annex A17.2.3).
// The ICRC masks the UDP checksum, so either is valid, but frames are then
// not byte-identical to rxe's.
//
// # Where it is used
//
// gopacket belongs at softhca's edges: writing and reading pcap files,
// dissecting packets in tests and tools, and framing on the TAP link. The
// engine (hca, qp, ...) never imports this package; it works on wire's
// views directly, which is cheaper and keeps gopacket out of the data path.
//
// # Ownership and threading
//
// A BTH layer is not safe for concurrent use. After DecodeFromBytes its
// Contents, Payload and Packet views alias the decoded bytes, which must not
// be reused while the layer is in use; Headers and ICRC are copies. The
// package keeps no mutable state besides gopacket's registration tables,
// written once at init.
package layers
