package forecast

import (
	"context"
	"maps"
	"sync"
)

// Store keeps what Demands learned across restarts and leader changes,
// each as the JSON its MarshalJSON writes, by a name (a pool's, a
// group's).
type Store interface {
	// Load returns what is saved, by name; nothing saved is no error.
	Load(ctx context.Context) (map[string][]byte, error)
	// Save replaces what is saved with the Demands given.
	Save(ctx context.Context, demands map[string][]byte) error
}

// Memory is a Store in the process's memory: what it holds goes with the
// process. Safe for concurrent use.
type Memory struct {
	mu    sync.Mutex
	saved map[string][]byte
}

// Load implements Store.
func (m *Memory) Load(context.Context) (map[string][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.saved), nil
}

// Save implements Store.
func (m *Memory) Save(_ context.Context, demands map[string][]byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.saved = maps.Clone(demands)
	return nil
}
