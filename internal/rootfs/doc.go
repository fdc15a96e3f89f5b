// Package rootfs applies locked layers into root trees: each layer starts from its parent's
// cached tree and adds users and groups with fixed ids, its locked RPMs, files, services and
// commands. Finished layers are kept in a content-addressed cache so an edit rebuilds only the
// layer that changed and those above it. Normalize is the one pass that makes a tree reproducible.
package rootfs
