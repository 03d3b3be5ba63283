package cloud

import (
	"fmt"
	"regexp"
)

// installPattern is what an install ID may be: short enough for the
// narrowest cloud's tags (Kamatera's 24 characters, "k8scai-" included)
// and plain enough for any of them.
var installPattern = regexp.MustCompile(`^[a-z0-9]{4,16}$`)

// CheckInstall returns an error when id cannot be an install ID.
func CheckInstall(id string) error {
	if !installPattern.MatchString(id) {
		return fmt.Errorf("%q is not an install ID: want 4 to 16 lowercase letters and digits", id)
	}
	return nil
}
