package spec

import (
	"slices"
	"strings"
)

// arches are the architectures Rocky Linux 9 is built for, as dnf's $basearch names them.
var arches = []string{"x86_64", "aarch64", "ppc64le", "s390x"}

// Image is one images/<name>.toml: a role and the layers that make it.
type Image struct {
	Name       string
	Role       string // master or compute
	ReleaseVer string // dnf's $releasever
	Arch       string
	Layers     []string // as listed; Resolve orders them
	KernelArgs []string
	Path       string // the file, as given to LoadImage

	paths map[string]int
}

// LoadImage reads and checks the image file at path.
func LoadImage(path string) (*Image, error) {
	r, t, err := open(path)
	if err != nil {
		return nil, err
	}
	t.only("name", "role", "layers", "releasever", "arch", "kernel_args")
	t.required("name", "role", "layers", "releasever", "arch")
	img := &Image{
		Name:       t.str("name"),
		Role:       t.str("role"),
		ReleaseVer: t.str("releasever"),
		Arch:       t.str("arch"),
		Layers:     t.strs("layers", checkName),
		KernelArgs: t.strs("kernel_args", checkKernelArg),
		Path:       path,
		paths:      r.paths,
	}
	checkImage(t, img)
	if err := r.done(); err != nil {
		return nil, err
	}
	return img, nil
}

func checkImage(t table, img *Image) {
	check(t, "name", checkName(img.Name))
	checkFileName(t, img.Name)
	if !slices.Contains(roleNames, img.Role) {
		t.r.fail("role", "unknown role %q (known: compute, master)", img.Role)
	}
	if len(img.Layers) == 0 {
		t.r.fail("layers", "an image needs at least one layer")
	}
	if !isWord(img.ReleaseVer, ".") {
		t.r.fail("releasever", "%q is not a release version (want e.g. \"9\")", img.ReleaseVer)
	}
	if !slices.Contains(arches, img.Arch) {
		t.r.fail("arch", "unknown architecture %q (Rocky Linux 9 is built for %s)", img.Arch, strings.Join(arches, ", "))
	}
}
