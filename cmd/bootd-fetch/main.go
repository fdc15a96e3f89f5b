// Command bootd-fetch is a node's fetch program, run in its initramfs: it rebuilds the root image
// from the casync index bootd names on the kernel command line, with what the node holds, its
// peers' chunks and bootd's, and serves the chunks it holds to other nodes.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
)

const usage = `usage:
  bootd-fetch root --output FILE|--cache DIR [--cmdline FILE] [--seed IMAGE:INDEX]... [--port N] [--stats FILE]
      fetch the root image named on the kernel command line (bootd=, rd.bootd.sha256=,
      rd.bootd.index=, rd.bootd.index.sha256=, root=live:URL) into FILE, checked; with --cache,
      into DIR on the node's cache disk, by its sha256, unless DIR holds it checked already (then
      nothing is fetched), seeded by the versions DIR holds, keeping the last two; the image's
      path is printed. With --port, serve its chunks to other nodes from the start (a process
      that stays when this one ends), and tell bootd where the root came from
  bootd-fetch serve --image FILE --index FILE --port N [--have FILE] [--bootd URL --index-sha256 SHA]
      serve the chunks of FILE as its index lists them, each checked before it leaves; with
      --bootd, announce them to bootd every 30 s
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "root":
		err = root(os.Args[2:])
	case "serve":
		err = serve(os.Args[2:])
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "bootd-fetch: unknown command %q\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if errors.Is(err, flag.ErrHelp) {
		return // the flag set printed its flags
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bootd-fetch: %v\n", err)
		os.Exit(1)
	}
}
