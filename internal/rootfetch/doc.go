// Package rootfetch is a node's side of chunked images: it rebuilds a root image from its casync
// index with what the node already holds as seeds, fetches only the missing chunks (from peers,
// else from bootd), checks every chunk and the whole image, falls back to the whole file, and
// serves the chunks it holds to other nodes.
package rootfetch
