package imgbuild

import (
	"github.com/labcluster/gpucluster/internal/kickstart"
	"github.com/labcluster/gpucluster/internal/resolve"
	"github.com/labcluster/gpucluster/internal/spec"
)

// KickstartImage is kickstart's view of plan as lock pins it. It wants the
// lock made for this plan, layers one to one, so that a disk install gets
// the packages the netboot image has.
func KickstartImage(plan *spec.Plan, lock *resolve.LockFile) (kickstart.Image, error) {
	if err := lock.CheckFresh(lockDigest(plan), layerRefs(plan)); err != nil {
		return kickstart.Image{}, err
	}
	img := kickstart.Image{Name: plan.Image.Name, Role: plan.Image.Role, LockDigest: lock.Digest(),
		SourceDateEpoch: lock.SourceDateEpoch, KernelArgs: plan.Image.KernelArgs}
	for _, r := range plan.Repos() {
		img.Repos = append(img.Repos, kickstart.Repo{ID: r.ID, BaseURL: r.BaseURL})
	}
	for i, l := range plan.Layers {
		img.Layers = append(img.Layers, kickstartLayer(l, lock.Layers[i]))
	}
	return img, nil
}

func kickstartLayer(l *spec.Layer, locked resolve.LockLayer) kickstart.Layer {
	kl := kickstart.Layer{Name: l.Name, KernelArgs: l.KernelArgs, Modules: l.Modules.Enable,
		Enable: l.Services.Enable, Disable: l.Services.Disable}
	for _, p := range locked.Packages {
		kl.Packages = append(kl.Packages, kickstart.Package{Name: p.Name, Version: p.Version, Release: p.Release, Arch: p.Arch})
	}
	for _, g := range l.Groups {
		kl.Groups = append(kl.Groups, kickstart.Group{Name: g.Name, GID: g.GID})
	}
	for _, u := range l.Users {
		kl.Users = append(kl.Users, kickstart.User{Name: u.Name, UID: u.UID, GID: u.GID, Home: u.Home, Shell: u.Shell, Comment: u.Comment})
	}
	for _, f := range l.Files {
		kl.Files = append(kl.Files, kickstart.File{Path: f.Path, Owner: f.Owner, Group: f.Group, Mode: f.Mode, Open: f.Open})
	}
	for _, c := range l.Run {
		kl.Run = append(kl.Run, kickstart.Command{Command: c.Command, Description: c.Description})
	}
	return kl
}
