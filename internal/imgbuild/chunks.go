package imgbuild

import (
	"context"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/artifact"
	"github.com/labcluster/gpucluster/internal/castr"
)

// ChunkReport is what publishing the root's chunks did.
type ChunkReport struct {
	Chunks, NewChunks int
	NewBytes          int64
	Duration          time.Duration
}

// publish chunks the root image into the chunk store shared by every version under o.OutDir,
// lists the index in the manifest and writes the version. It holds the store's shared lock from
// the first chunk to the rename that publishes the version, so that a prune (which reads only
// published indexes) cannot remove chunks in between. A reused packed root is chunked again too
// (only its reading costs: its chunks are in the store already, or are put back if pruned).
func publish(ctx context.Context, o Options, m artifact.Manifest, stage string, known map[string]artifact.File, r *Report) (string, error) {
	unlock, _, err := castr.Lock(o.OutDir, false)
	if err != nil {
		return "", err
	}
	defer unlock()
	if m.Rootfs != nil {
		t := time.Now()
		o.progress("chunks", 0, 0)
		st, err := castr.Chunk(ctx, filepath.Join(stage, m.Rootfs.File), o.OutDir, filepath.Join(stage, castr.IndexFile))
		if err != nil {
			return "", err
		}
		m.Rootfs.Index = castr.IndexFile
		r.Chunks = ChunkReport{Chunks: st.Chunks, NewChunks: st.NewChunks, NewBytes: st.NewBytes, Duration: time.Since(t)}
		o.Log.WithFields(logrus.Fields{"chunks": st.Chunks, "new_chunks": st.NewChunks, "new_bytes": st.NewBytes}).Info("root image chunked")
	}
	return artifact.WriteLinked(o.OutDir, m, stage, known)
}

// pruneChunks removes the chunks no published version references any more (versions removed
// by hand free theirs here, at the next build). A build holding the store skips it.
func pruneChunks(ctx context.Context, o Options) {
	p, ok, err := castr.Prune(ctx, o.OutDir)
	switch {
	case err != nil:
		o.Log.WithError(err).Warn("chunk store not pruned")
	case !ok:
		o.Log.Info("chunk store not pruned: another build is publishing into it; the next build prunes")
	default:
		o.Log.WithFields(logrus.Fields{"indexes": p.Indexes, "chunks": p.Chunks, "removed": p.Removed}).Info("chunk store pruned")
	}
}
