package artifact

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ChunkStoreDir is the chunk store under the images directory: the chunks of every version's
// root image (casync's layout, uncompressed: <first 4 hex digits>/<64 hex digits>), shared by
// all images and versions. No image can be named so: names never start with '.'.
const ChunkStoreDir = ".castr"

// ValidChunkName reports whether prefix/name is a chunk's place in the store: name is 64
// lowercase hex digits (the sha256 of the chunk's bytes) and prefix its first four. Nothing
// else in the store may be served: not its lock, not a writer's temporary file.
func ValidChunkName(prefix, name string) bool {
	return len(name) == 64 && isLowerHex(name) && prefix == name[:4]
}

func isLowerHex(s string) bool {
	return strings.Trim(s, "0123456789abcdef") == ""
}

// OpenChunk opens a chunk of the store under imagesDir: a regular file, never a link, only at a
// name ValidChunkName accepts, so a request can never reach outside the store. It does not check
// the chunk's bytes: a node checks every chunk against its hash (the index, which bootd
// verified, names it), and a missing or damaged chunk sends the node to the whole file. Errors
// wrap ErrNotFound.
func OpenChunk(imagesDir, prefix, name string) (*os.File, error) {
	if !ValidChunkName(prefix, name) {
		return nil, fmt.Errorf("chunk %q/%q: not a chunk name: %w", prefix, name, ErrNotFound)
	}
	f, _, err := openRegular(filepath.Join(imagesDir, ChunkStoreDir, prefix, name))
	if err != nil {
		return nil, fmt.Errorf("chunk %s: %w: %w", name, ErrNotFound, err)
	}
	return f, nil
}
