package hca

import "strconv"

func hex32(v uint32) string { return "0x" + strconv.FormatUint(uint64(v), 16) }
func hex64(v uint64) string { return "0x" + strconv.FormatUint(v, 16) }
func itoa(v int) string     { return strconv.Itoa(v) }
