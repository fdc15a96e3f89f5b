//go:build !linux

package artifact

// renameNoReplace is check + rename where renameat2 is unavailable.
func renameNoReplace(from, to string) error {
	return renameChecked(from, to)
}
