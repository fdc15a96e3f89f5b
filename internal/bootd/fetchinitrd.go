package bootd

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/atomicfile"
	"github.com/labcluster/gpucluster/internal/config"
	"github.com/labcluster/gpucluster/internal/fetchinitrd"
)

// prepareFetchInitrd writes the initrd carrying the fetch program into the state directory. It
// returns "" when there is no program to send: nodes then fetch their root as one file.
func prepareFetchInitrd(cfg config.Config, log logrus.FieldLogger) (string, error) {
	prog, ok, err := config.FindFetchProgram(cfg.FetchProgram)
	if err != nil || !ok {
		if err == nil {
			log.Warn("no bootd-fetch found (fetch_program, beside bootd, /usr/libexec/bootd): nodes fetch their root image whole, not by chunks")
		}
		return "", err
	}
	data, err := os.ReadFile(prog)
	if err != nil {
		return "", fmt.Errorf("fetch program: %w", err)
	}
	img, err := fetchinitrd.Make(data)
	if err != nil {
		return "", err
	}
	path := filepath.Join(cfg.StateDir, fetchinitrd.Name)
	if err := atomicfile.Write(path, img, 0o644); err != nil {
		return "", err
	}
	log.WithFields(logrus.Fields{"program": prog, "initrd": path, "bytes": len(img)}).Info("nodes fetch chunked roots with bootd-fetch")
	return path, nil
}
