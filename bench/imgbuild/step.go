package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/imgbuild"
	"github.com/labcluster/gpucluster/internal/rpmcmd"
	"github.com/labcluster/gpucluster/internal/testkit/testrepo"
)

// step is one measured piece of work, run in a child process (runStep).
type step struct {
	Kind string // lock, build, hand-install, squash

	// lock and build
	Image, Site, Out, Cache, Version string

	// hand-install: dnf --installroot Root of Names, with Repos and Streams
	Root, Work string
	Repos      []rpmcmd.Repo
	Streams    []string
	Names      []string

	// squash: mksquashfs Args
	Args []string

	// setup: the stand-in tree from Tree into Dir, for Image, with Large
	Tree, Dir string
	Large     *testrepo.Large
}

// stepResult is what a build or setup step reports back.
type stepResult struct {
	Report *imgbuild.Report
	Site   *testrepo.Site
}

// childStep runs the step named in the environment and prints its result as JSON.
func childStep(js string) error {
	var st step
	if err := json.Unmarshal([]byte(js), &st); err != nil {
		return err
	}
	ctx := context.Background()
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	log.SetOutput(os.Stderr)
	o := imgbuild.Options{SitePath: st.Site, OutDir: st.Out, CacheDir: st.Cache, Version: st.Version, Log: log}
	var res stepResult
	var err error
	switch st.Kind {
	case "lock":
		_, _, err = imgbuild.Lock(ctx, st.Image, o)
	case "build":
		res.Report, err = imgbuild.Build(ctx, st.Image, o)
	case "hand-install":
		err = handInstall(ctx, st, log)
	case "setup":
		var site testrepo.Site
		site, err = testrepo.StandInTreeLarge(ctx, st.Tree, st.Dir, st.Large, st.Image)
		res.Site = &site
	case "squash":
		var msg []byte
		if msg, err = exec.CommandContext(ctx, "mksquashfs", st.Args...).CombinedOutput(); err != nil {
			err = fmt.Errorf("mksquashfs %s: %v: %s", strings.Join(st.Args, " "), err, msg)
		}
	default:
		err = fmt.Errorf("unknown step %q", st.Kind)
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// handInstall is the baseline's install: every package of the image into an empty root with
// dnf in one transaction, its module streams enabled first.
func handInstall(ctx context.Context, st step, log logrus.FieldLogger) error {
	env := &rpmcmd.Env{Root: st.Root, WorkDir: st.Work, Repos: st.Repos, Modules: st.Streams, Log: log}
	if err := os.MkdirAll(env.Root, 0o755); err != nil {
		return err
	}
	if err := env.EnableModules(ctx); err != nil {
		return err
	}
	_, err := env.DNF(ctx, append([]string{"install"}, st.Names...)...)
	return err
}
