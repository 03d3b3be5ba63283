package cloud

import (
	"errors"
	"fmt"
)

// Error classes. Callers test them with errors.Is; backends wrap their errors
// with NewError so that both the class and the cause survive.
var (
	// ErrCapacity is a stock-out: try the next offering, tell the autoscaler.
	ErrCapacity = errors.New("insufficient capacity")
	// ErrQuota is an account limit (instances, GPUs, volumes, funds).
	ErrQuota = errors.New("quota exceeded")
	// ErrNotFound is an object the cloud does not know.
	ErrNotFound = errors.New("not found")
	// ErrInvalid is a request the cloud refuses as malformed: a configuration
	// problem, never retried.
	ErrInvalid = errors.New("invalid request")
	// ErrTransient is a failure worth retrying with backoff (429, 5xx, network).
	ErrTransient = errors.New("transient failure")
	// ErrOutcomeUnknown is a create whose request may have reached the cloud
	// but whose answer was lost. It is never retried blindly: the instance
	// must be looked up by name first.
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrRolledBack is no class but a mark on a create's error: the cloud
	// made part of the instance, the create failed after that, and the
	// backend deleted what was made, and saw it gone (not only being
	// deleted), before it returned. Nothing of the
	// order is left, even when the caller's context ended meanwhile, so
	// the caller may send it again instead of waiting for a list.
	ErrRolledBack = errors.New("rolled back")
)

// Error is a cloud failure with a class.
type Error struct {
	// Class is one of the Err* sentinels above.
	Class error
	// Op names the operation, e.g. "create", "list".
	Op string
	// Err is the underlying cause; may be nil.
	Err error
}

// NewError wraps cause with a class and an operation name.
func NewError(class error, op string, cause error) *Error {
	return &Error{Class: class, Op: op, Err: cause}
}

// Errorf builds a classed error from a format string.
func Errorf(class error, op, format string, args ...any) *Error {
	return &Error{Class: class, Op: op, Err: fmt.Errorf(format, args...)}
}

// maxCauseText bounds the text of an Error's cause: each backend cuts a
// cloud's answer to MaxErrorText, and this holds whatever a backend wraps
// around it, or a cause that reached here uncut.
const maxCauseText = 4 * MaxErrorText

func (e *Error) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("%s: %v", e.Op, e.Class)
	}
	return fmt.Sprintf("%s: %v: %s", e.Op, e.Class, Truncate(clean(e.Err.Error()), maxCauseText))
}

// Unwrap exposes both the class and the cause to errors.Is and errors.As.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Class}
	}
	return []error{e.Class, e.Err}
}

// Class returns the class of err, or nil when err carries none of the known
// classes. Unclassed errors should be treated as transient by callers that
// retry, and reported as they are otherwise.
func Class(err error) error {
	for _, c := range []error{ErrCapacity, ErrQuota, ErrNotFound, ErrInvalid, ErrOutcomeUnknown, ErrTransient} {
		if errors.Is(err, c) {
			return c
		}
	}
	return nil
}

// IsClass reports whether class is err's class as Class picks it: unlike
// errors.Is(err, class), an error that carries several classes has only
// the first of Class's order.
func IsClass(err, class error) bool { return errors.Is(Class(err), class) }

// Retryable reports whether an operation that failed with err may be sent
// again as it is. Outcome-unknown creates are not retryable.
func Retryable(err error) bool {
	class := Class(err)
	return err != nil && (class == nil || errors.Is(class, ErrTransient))
}
