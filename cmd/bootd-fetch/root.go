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
	output := fs.String("output", "", "the root image to write")
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
	if *output == "" {
		return fmt.Errorf("root: --output is required")
	}
	a, err := readCmdline(*cmdline)
	if err != nil {
		return err
	}
	log := logrus.New()
	// Plain lines: they go to a node's console, which dracut gives no colours.
	log.SetFormatter(&logrus.TextFormatter{DisableColors: true, FullTimestamp: true})
	ctx := context.Background()
	var server *exec.Cmd
	o := rootfetch.Options{Index: a.Index, IndexSHA256: a.IndexSHA256, Store: a.Bootd + "/chunks/", Seeds: seeds,
		Output: *output, SHA256: a.SHA256, Whole: a.Whole, Log: log, HaveFile: *have, SharedOutput: *shared}
	if *port > 0 {
		o.PeerList = func(ctx context.Context) []string { return askPeers(ctx, a.Bootd, a.IndexSHA256, log) }
		if a.Address != "" {
			// As bootd names this node to its peers.
			o.Self = "http://" + net.JoinHostPort(a.Address, strconv.Itoa(*port)) + "/chunks/"
		}
		o.OnIndex = func(idx desync.Index) {
			server = startServer(*output, o.HaveFile, idx, *port, a, log)
		}
	}
	st, err := rootfetch.Fetch(ctx, o)
	if err != nil {
		if server != nil && server.Process != nil {
			server.Process.Kill()
		}
		return err
	}
	log.WithFields(logrus.Fields{"bytes": st.Size, "from_seeds": st.FromSeeds, "from_bootd": st.FromBootd,
		"from_peers": st.FromPeers, "peers_dropped": len(st.PeersDropped), "whole": st.Whole,
		"duration": st.Duration.Round(time.Millisecond).String()}).Info("root image fetched and checked")
	if *stats != "" {
		b, _ := json.Marshal(st)
		if err := os.WriteFile(*stats, b, 0o644); err != nil {
			return err
		}
	}
	report(ctx, a.Bootd, st, log)
	return nil
}

// report tells bootd where the root came from (bootd nodes' ROOT); a failure costs nothing but
// the column.
func report(ctx context.Context, bootd string, st rootfetch.Stats, log logrus.FieldLogger) {
	r := map[string]any{"source": "chunks", "storage": "ram", "size": st.Size, "from_bootd": st.FromBootd,
		"from_peers": st.FromPeers, "from_seeds": st.FromSeeds, "peers_dropped": len(st.PeersDropped), "seconds": st.Duration.Seconds()}
	if st.Whole {
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
func startServer(image, have string, idx desync.Index, port int, a bootArgs, log logrus.FieldLogger) *exec.Cmd {
	if have == "" {
		have = image + rootfetch.HaveSuffix
	}
	indexFile := strings.TrimSuffix(have, rootfetch.HaveSuffix) + ".caibx"
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
	self, err := os.Executable()
	if err != nil {
		log.WithError(err).Warn("not serving chunks to peers")
		return nil
	}
	cmd := &exec.Cmd{Path: self, Args: []string{"@bootd-fetch", "serve", "--image", image, "--index", indexFile,
		"--have", have, "--port", strconv.Itoa(port), "--bootd", a.Bootd, "--index-sha256", a.IndexSHA256},
		Stdout: os.Stdout, Stderr: os.Stderr, SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	if err := cmd.Start(); err != nil {
		log.WithError(err).Warn("not serving chunks to peers")
		return nil
	}
	go cmd.Wait() //nolint: the server outlives this process; reap it if it ends first
	return cmd
}
