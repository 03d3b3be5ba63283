package faults

import "bytes"

// Status maps a fuzzed number to a status an HTTP server may answer: the
// number itself from 200 to 599, else one in that range.
func Status(n uint16) int {
	if code := int(n); code >= 200 && code <= 599 {
		return code
	}
	return 200 + int(n)%400
}

// IsJSONArray reports whether body is, at least at its start, a JSON array:
// what an answer listing a cloud's servers must be.
func IsJSONArray(body []byte) bool {
	t := bytes.TrimSpace(body)
	return len(t) > 0 && t[0] == '['
}
