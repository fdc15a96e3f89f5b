// Package castr publishes an image's root as a casync chunk index over one chunk store shared by
// every version (desync's content-defined chunking and layout), and prunes the chunks no
// published index references.
package castr
