package testrepo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// ImageEpoch is the fixed SOURCE_DATE_EPOCH that tests and the image benchmark lock and build
// with, so that their builds are reproducible run to run. (Real locks record their own epoch,
// which builds then use: LockFile.SourceDateEpoch.)
const ImageEpoch = "1763683200"

// NeedTools fails t unless MissingTools finds everything.
func NeedTools(t testing.TB, extra ...string) {
	t.Helper()
	if err := MissingTools(extra...); err != nil {
		t.Fatal(err)
	}
}

// MissingTools says what is missing unless this runs as root with rpmbuild, createrepo_c, rpm,
// busybox and the extra tools on PATH, as on the build machines and in CI.
func MissingTools(extra ...string) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (rpm --root, dnf --installroot and scriptlets chroot): run as root, as CI does")
	}
	for _, tool := range append([]string{"rpmbuild", "createrepo_c", "rpm", Busybox}, extra...) {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("needs %s: %w (scripts/setup-debian.sh installs it)", tool, err)
		}
	}
	return nil
}

// Context returns a context for t's builds and installs: it ends after three
// minutes or when t's cleanups run.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// QuietLog is a logger for tests that runs every logging call, debug included, and prints
// nothing.
func QuietLog() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	l.SetLevel(logrus.DebugLevel)
	return l
}
