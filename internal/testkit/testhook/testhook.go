// Package testhook swaps a package variable (a hook, a timeout) for the length of one test.
package testhook

import "testing"

// Set makes *p v until t and its subtests end, then puts the old value back.
func Set[T any](t testing.TB, p *T, v T) {
	t.Helper()
	old := *p
	*p = v
	t.Cleanup(func() { *p = old })
}
