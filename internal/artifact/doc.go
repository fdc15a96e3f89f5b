// Package artifact is the versioned image directory of contract 1: imgbuild
// writes <images>/<name>/<version>/ with manifest.json and the files it lists
// (Write), and bootd reads it back (Open, Verify) through a Catalog that serves
// only versions whose every file matches the manifest's size and sha256.
package artifact
