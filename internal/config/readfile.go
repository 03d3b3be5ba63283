package config

import (
	"fmt"
	"io"
	"os"
)

// MaxFileSize bounds every file gpuscaler reads as configuration (the
// config file, seed formats, .env, templates): a config is kilobytes, and
// --config /dev/zero must fail at once, not when memory runs out.
const MaxFileSize = 4 << 20

// ReadFile reads a configuration file of at most MaxFileSize bytes.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%s: larger than %d MiB; not a config file", path, MaxFileSize>>20)
	}
	return data, nil
}
