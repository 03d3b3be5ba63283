// Package fakeid makes the resource IDs the clouds' fake APIs hand out:
// random version-4 UUIDs, as the real APIs give, or a sequence drawn from
// a seed, so that a chaos campaign replayed from its seed meets the same
// IDs (its injected faults are drawn from each request's path and body,
// which carry them).
package fakeid

import (
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
)

// Source hands out UUIDs; it is safe for concurrent use.
type Source struct {
	mu sync.Mutex
	r  io.Reader
}

// New returns a Source drawn from seed; 0 draws from crypto/rand.
func New(seed uint64) *Source {
	if seed == 0 {
		return &Source{r: crand.Reader}
	}
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	return &Source{r: rand.NewChaCha8(key)}
}

// UUID returns the next version-4 UUID.
func (s *Source) UUID() string {
	var b [16]byte
	s.mu.Lock()
	_, _ = io.ReadFull(s.r, b[:])
	s.mu.Unlock()
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
