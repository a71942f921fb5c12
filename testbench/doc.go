// Package testbench is a packet testbench for softhca, in the manner of
// gVisor's packetimpact.
package testbench
