package forecast

import "context"

// Store keeps what Demands learned across restarts and leader changes,
// each as the JSON its MarshalJSON writes, by a name (a pool's, a
// group's).
type Store interface {
	// Load returns what is saved, by name; nothing saved is no error.
	Load(ctx context.Context) (map[string][]byte, error)
	// Save replaces what is saved with the Demands given.
	Save(ctx context.Context, demands map[string][]byte) error
}
