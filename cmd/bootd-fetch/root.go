package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/folbricht/desync"
	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/rootfetch"
)

type seedFlags []rootfetch.Seed

func (s *seedFlags) String() string { return fmt.Sprint(*s) }
func (s *seedFlags) Set(v string) error {
	img, idx, ok := strings.Cut(v, ":")
	if !ok || img == "" || idx == "" {
		return fmt.Errorf("--seed %q: want IMAGE:INDEX", v)
	}
	*s = append(*s, rootfetch.Seed{File: img, Index: idx})
	return nil
}

func root(args []string) error {
	fs := flag.NewFlagSet("root", flag.ContinueOnError)
	output := fs.String("output", "", "the root image to write (in RAM: the initramfs's /tmp)")
	cacheDir := fs.String("cache", "", "a directory on the node's cache disk: the image is kept there, by its sha256, "+
		"with the last version before it; a version held is not fetched again; its path is printed")
	cmdline := fs.String("cmdline", "/proc/cmdline", "the kernel command line to read")
	port := fs.Int("port", 0, "serve the image's chunks to other nodes on this port (0: do not)")
	stats := fs.String("stats", "", "write where the image's bytes came from (JSON) here")
	have := fs.String("have", "", "keep the have-map (what peers may ask for) here (default: OUTPUT.have)")
	shared := fs.Bool("shared-output", false, "benchmarks only: other fetches write the same image into OUTPUT at once; never truncate it")
	var seeds seedFlags
	fs.Var(&seeds, "seed", "an image the node holds and its index, IMAGE:INDEX (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*output == "") == (*cacheDir == "") {
		return fmt.Errorf("root: give --output (the image in RAM) or --cache (the image on the cache disk)")
	}
	a, err := readCmdline(*cmdline)
	if err != nil {
		return err
	}
	log := logrus.New()
	// Plain lines: they go to a node's console, which dracut gives no colours.
	log.SetFormatter(&logrus.TextFormatter{DisableColors: true, FullTimestamp: true})
	f := &fetcher{a: a, port: *port, log: log}
	o := rootfetch.Options{Index: a.Index, IndexSHA256: a.IndexSHA256, Store: a.Bootd + "/chunks/", Seeds: seeds,
		Output: *output, SHA256: a.SHA256, Whole: a.Whole, Log: log, HaveFile: *have, SharedOutput: *shared}
	var st rootfetch.Stats
	storage := "ram"
	if *cacheDir != "" {
		storage = "disk"
		st, *output, err = f.fromCache(context.Background(), rootfetch.Cache{Dir: *cacheDir}, o)
	} else {
		st, err = f.fetch(context.Background(), o)
	}
	if err != nil {
		return err
	}
	if *stats != "" {
		b, _ := json.Marshal(st)
		if err := os.WriteFile(*stats, b, 0o644); err != nil {
			return err
		}
	}
	report(context.Background(), a.Bootd, st, storage, log)
	if *cacheDir != "" {
		fmt.Println(*output)
	}
	return nil
}

// fetcher fetches the root the command line names, serving its chunks to peers meanwhile.
type fetcher struct {
	a    bootArgs
	port int
	log  logrus.FieldLogger
	idx  desync.Index
	// indexFile is where the chunk server's copy of the index goes ("": beside the image).
	indexFile string
}

// fetch fetches into o.Output (by chunks, else whole), with a chunk server from the moment the
// index is known.
func (f *fetcher) fetch(ctx context.Context, o rootfetch.Options) (rootfetch.Stats, error) {
	var server *exec.Cmd
	o.OnIndex = func(idx desync.Index) {
		f.idx = idx
		if f.port > 0 {
			server = startServer(o.Output, o.HaveFile, f.indexFile, &idx, f.port, f.a, f.log)
		}
	}
	if f.port > 0 {
		o.PeerList = func(ctx context.Context) []string { return askPeers(ctx, f.a.Bootd, f.a.IndexSHA256, f.log) }
		if f.a.Address != "" {
			// As bootd names this node to its peers.
			o.Self = "http://" + net.JoinHostPort(f.a.Address, strconv.Itoa(f.port)) + "/chunks/"
		}
	}
	st, err := rootfetch.Fetch(ctx, o)
	if err != nil {
		if server != nil && server.Process != nil {
			server.Process.Kill()
		}
		return st, err
	}
	f.log.WithFields(logrus.Fields{"bytes": st.Size, "from_seeds": st.FromSeeds, "from_bootd": st.FromBootd,
		"from_peers": st.FromPeers, "peers_dropped": len(st.PeersDropped), "whole": st.Whole,
		"duration": st.Duration.Round(time.Millisecond).String()}).Info("root image fetched and checked")
	return st, nil
}

// fromCache boots the version from the cache disk when it holds it checked (no root byte over
// the network); else fetches it there, seeded by the versions it holds, and keeps it.
func (f *fetcher) fromCache(ctx context.Context, c rootfetch.Cache, o rootfetch.Options) (rootfetch.Stats, string, error) {
	start := time.Now()
	sum := f.a.SHA256
	hit, err := c.Lookup(sum)
	if err != nil {
		return rootfetch.Stats{}, "", err
	}
	img := c.Image(sum)
	if hit {
		c.Touch(sum)
		fi, err := os.Stat(img)
		if err != nil {
			return rootfetch.Stats{}, "", err
		}
		st := rootfetch.Stats{Size: fi.Size(), FromSeeds: fi.Size(), Duration: time.Since(start), Cached: true}
		f.log.WithField("image", img).Info("root image found on the cache disk and checked: nothing fetched")
		if f.port > 0 {
			if idx, err := castrIndex(c.Index(sum)); err == nil {
				have := img + rootfetch.HaveSuffix
				if err := rootfetch.WriteFullHave(have, idx); err == nil {
					startServer(img, have, c.Index(sum), nil, f.port, f.a, f.log)
				}
			}
		}
		return st, img, nil
	}
	o.Output, o.HaveFile = c.Partial(sum), img+rootfetch.HaveSuffix
	// The server's index is the one the cache keeps (Store writes the same bytes there again).
	f.indexFile = c.Index(sum)
	o.Seeds = append(append(o.Seeds, c.Damaged(sum)...), c.Seeds(sum)...)
	st, err := f.fetch(ctx, o)
	if err != nil {
		return st, "", err
	}
	if err := c.Store(sum, f.idx); err != nil {
		return st, "", err
	}
	return st, img, nil
}

func castrIndex(path string) (desync.Index, error) {
	fh, err := os.Open(path)
	if err != nil {
		return desync.Index{}, err
	}
	defer fh.Close()
	return desync.IndexFromReader(fh)
}

// report tells bootd where the root came from (bootd nodes' ROOT); a failure costs nothing but
// the column.
func report(ctx context.Context, bootd string, st rootfetch.Stats, storage string, log logrus.FieldLogger) {
	r := map[string]any{"source": "chunks", "storage": storage, "size": st.Size, "from_bootd": st.FromBootd,
		"from_peers": st.FromPeers, "from_seeds": st.FromSeeds, "peers_dropped": len(st.PeersDropped), "seconds": st.Duration.Seconds()}
	switch {
	case st.Cached:
		r["source"] = "cache"
	case st.Whole:
		r["source"] = "whole"
	}
	b, _ := json.Marshal(r)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, bootd+"/api/v1/node/root", bytes.NewReader(b))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.WithError(err).Warn("root not reported to bootd")
		return
	}
	resp.Body.Close()
}

// askPeers asks bootd which other nodes serve this index; none is no error: bootd alone will do.
func askPeers(ctx context.Context, bootd, index string, log logrus.FieldLogger) []string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, bootd+"/api/v1/peers?index="+index, nil)
	if err != nil {
		return nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.WithError(err).Warn("no peers: bootd did not answer")
		return nil
	}
	defer resp.Body.Close()
	var r struct{ Peers []string }
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&r) != nil {
		log.WithField("status", resp.Status).Warn("no peers: bootd's answer was not a list")
		return nil
	}
	return r.Peers
}

// startServer writes the index beside the image and starts `bootd-fetch serve` on them, in its
// own session, named "@bootd-fetch": systemd leaves processes so named alive when it leaves the
// initramfs, so the node goes on serving its chunks from the root image it booted.
func startServer(image, have, indexFile string, idx *desync.Index, port int, a bootArgs, log logrus.FieldLogger) *exec.Cmd {
	if have == "" {
		have = image + rootfetch.HaveSuffix
	}
	if idx != nil {
		if indexFile == "" {
			indexFile = strings.TrimSuffix(have, rootfetch.HaveSuffix) + ".caibx"
		}
		f, err := os.Create(indexFile)
		if err == nil {
			_, err = idx.WriteTo(f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			log.WithError(err).Warn("not serving chunks to peers")
			return nil
		}
	}
	self, err := os.Executable()
	if err != nil {
		log.WithError(err).Warn("not serving chunks to peers")
		return nil
	}
	cmd := &exec.Cmd{Path: self, Args: []string{"@bootd-fetch", "serve", "--image", image, "--index", indexFile,
		"--have", have, "--port", strconv.Itoa(port), "--bootd", a.Bootd, "--index-sha256", a.IndexSHA256},
		// Its stdout is ours' stderr: with --cache our stdout is the image's path, read by the
		// initramfs through a pipe that a server holding it open would never close.
		Stdout: os.Stderr, Stderr: os.Stderr, SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	if err := cmd.Start(); err != nil {
		log.WithError(err).Warn("not serving chunks to peers")
		return nil
	}
	go cmd.Wait() //nolint: the server outlives this process; reap it if it ends first
	return cmd
}
