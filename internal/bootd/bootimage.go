package bootd

import "github.com/labcluster/gpucluster/internal/ctl"

// BootImage says which version of its role's image node name boots now, or why none: the
// answer to `bootd assign` carries it, so an admin who names a machine before building its
// image learns at once that it will wait (its console says so too, but nobody watches it).
// Resolving verifies a version the catalog has not seen yet, as the node's boot would.
func (c controller) BootImage(name string) ctl.BootImage {
	b := ctl.BootImage{Dir: c.d.cfg.ImagesDir}
	p, err := c.d.cfg.Place(name)
	if err != nil {
		b.Problem = err.Error()
		return b
	}
	b.Name, b.Pinned = p.Image, p.Version
	img, err := c.d.images.Resolve(p.Image, p.Version)
	if err != nil {
		b.Problem = err.Error()
		return b
	}
	b.Version = img.Manifest.Version
	return b
}
