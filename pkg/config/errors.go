package config

import (
	"errors"
	"fmt"
	"sort"
)

// KeyError is one configuration problem at one key. It wraps
// ErrInvalidConfig (and Err, when a lower-level error caused it), so
// errors.Is(err, ErrInvalidConfig) holds and errors.As finds the key.
// Parse, Load and Validate join several of them with errors.Join.
type KeyError struct {
	// Key is the dotted key path ("kinds.order.create.target"); "" for a
	// problem with the document as a whole (a YAML syntax error).
	Key string
	// Line in the YAML document, when known (0 otherwise).
	Line int
	// Msg says what is wrong.
	Msg string
	// Err is the underlying error, if any.
	Err error
}

// Error returns "key: message" (and the line when known).
func (e *KeyError) Error() string {
	s := e.Msg
	if e.Key != "" {
		s = e.Key + ": " + s
	}
	if e.Line > 0 {
		s += fmt.Sprintf(" (line %d)", e.Line)
	}
	return s
}

// Unwrap returns ErrInvalidConfig and the underlying error.
func (e *KeyError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalidConfig, e.Err}
	}
	return []error{ErrInvalidConfig}
}

// joinSorted orders the errors by key (map iteration is random; messages
// should not be) and joins them.
func joinSorted(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	sort.SliceStable(errs, func(i, j int) bool { return keyOf(errs[i]) < keyOf(errs[j]) })
	return errors.Join(errs...)
}

func keyOf(err error) string {
	var ke *KeyError
	if errors.As(err, &ke) {
		return ke.Key
	}
	return ""
}
