package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/rootfetch"
)

// announceEvery renews the node's entry in bootd's peer lists, which expire after 90 s.
const announceEvery = 30 * time.Second

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	image := fs.String("image", "", "the image file")
	index := fs.String("index", "", "its index (.caibx)")
	have := fs.String("have", "", "the have-map the fetch keeps (default: IMAGE.have)")
	port := fs.Int("port", 0, "the port to serve on")
	bootd := fs.String("bootd", "", "bootd's URL, to announce the chunks to")
	indexSHA := fs.String("index-sha256", "", "the index's sha256, as bootd knows it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *image == "" || *index == "" || *port <= 0 || *port > 65535 {
		return fmt.Errorf("serve: --image, --index and --port are required")
	}
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(*port))
	if err != nil {
		return err
	}
	ctx := context.Background()
	if *bootd != "" && *indexSHA != "" {
		go announce(ctx, *bootd, *indexSHA, *port)
	}
	return rootfetch.Serve(ctx, ln, *image, *index, *have)
}

// announce tells bootd, now and every announceEvery, that this node serves the index's chunks.
func announce(ctx context.Context, bootd, index string, port int) {
	log := logrus.New()
	url := fmt.Sprintf("%s/api/v1/node/peer?index=%s&port=%d", bootd, index, port)
	client := &http.Client{Timeout: 10 * time.Second}
	for {
		resp, err := client.Post(url, "", nil)
		if err != nil {
			log.WithError(err).Debug("announce to bootd failed")
		} else {
			resp.Body.Close()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(announceEvery):
		}
	}
}
