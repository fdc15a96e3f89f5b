package bootd

import (
	"time"

	"github.com/labcluster/gpucluster/internal/artifact"
	"github.com/labcluster/gpucluster/internal/ctl"
)

// bootImageWait bounds how long an assign's answer waits for an image version to verify: hashing
// a new multi-GB version takes longer than `bootd assign` waits for its answer (ctl's client
// timeout). The verification goes on after, and the catalog keeps its result for the node's boot.
var bootImageWait = 10 * time.Second

// resolveImage is the catalog's Resolve (a variable for tests).
var resolveImage = (*artifact.Catalog).Resolve

// BootImage says which version of its role's image node name boots now, or why none: the
// answer to `bootd assign` carries it, so an admin who names a machine before building its
// image learns at once that it will wait (its console says so too, but nobody watches it).
// Resolving verifies a version the catalog has not seen yet, as the node's boot would; when that
// takes longer than bootImageWait, the answer says it is still verifying.
func (c controller) BootImage(name string) ctl.BootImage {
	b := ctl.BootImage{Dir: c.d.cfg.ImagesDir}
	p, err := c.d.cfg.Place(name)
	if err != nil {
		b.Problem = err.Error()
		return b
	}
	b.Name, b.Pinned = p.Image, p.Version
	type resolved struct {
		img *artifact.Image
		err error
	}
	done := make(chan resolved, 1) // buffered: a resolve that outlives the wait ends on its own
	go func() {
		img, err := resolveImage(c.d.images, p.Image, p.Version)
		done <- resolved{img, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			b.Problem = r.err.Error()
			return b
		}
		b.Version = r.img.Manifest.Version
	case <-time.After(bootImageWait):
		b.Verifying = true
	}
	return b
}
