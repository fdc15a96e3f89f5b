package rootfs

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/labcluster/gpucluster/internal/atomicfile"
	"github.com/labcluster/gpucluster/internal/testkit/testhook"
)

// recordSyncs makes syncFS, rename and syncDir log what they do, in order, and still do it.
// check, if not nil, runs as each syncDir starts.
func recordSyncs(t *testing.T, check func(dir string)) *[]string {
	var events []string
	testhook.Set(t, &syncFS, func(dir string) error {
		events = append(events, "syncfs "+dir)
		return syncFileSystem(dir)
	})
	testhook.Set(t, &rename, func(from, to string) error {
		events = append(events, "rename "+from+" -> "+to)
		return os.Rename(from, to)
	})
	testhook.Set(t, &syncDir, func(dir string) error {
		if check != nil {
			check(dir)
		}
		events = append(events, "syncdir "+dir)
		return atomicfile.SyncDir(dir)
	})
	return &events
}

// TestLayerDurableBeforeRename: each layer's tree is written out (its file system synced) before
// the rename that names it finished, and the cache directory synced after it, so a power cut
// never leaves a key over files whose data never reached the disk.
func TestLayerDurableBeforeRename(t *testing.T) {
	requireRoot(t)
	base, top, baseRPMs, topRPMs := testLayers(t)
	b := newBuilder(t, &fakeInstall{})
	layers := filepath.Join(b.CacheDir, "layers")
	events := recordSyncs(t, nil)
	res, err := b.Build(context.Background(), []Step{{Layer: base, RPMs: baseRPMs}, {Layer: top, RPMs: topRPMs}})
	if err != nil {
		t.Fatal(err)
	}
	if len(*events) != 3*len(res) {
		t.Fatalf("events %q, want a sync, a rename and a directory sync for each of %d layers", *events, len(res))
	}
	for i, r := range res {
		t.Run(r.Layer, func(t *testing.T) {
			got := (*events)[3*i : 3*i+3]
			stage := strings.TrimPrefix(got[0], "syncfs ")
			want := []string{
				"syncfs " + stage,
				"rename " + filepath.Join(stage, "diff") + " -> " + filepath.Join(layers, r.Key),
				"syncdir " + layers,
			}
			if filepath.Dir(stage) != layers || !strings.HasPrefix(filepath.Base(stage), stagePrefix) || !slices.Equal(got, want) {
				t.Errorf("events %q, want %q with a stage directory under %s", got, want, layers)
			}
		})
	}
}

// TestPruneDurableBeforeRemoval: a pruned tree's rename to a scratch name is on disk before
// any of its files is removed, so a power cut mid-removal cannot bring the key back over a tree
// that lost some of its files.
func TestPruneDurableBeforeRemoval(t *testing.T) {
	cache := t.TempDir()
	key := strings.Repeat("c", 64)
	layers := filepath.Join(cache, "layers")
	scratch := filepath.Join(layers, stagePrefix+"pruned-"+key)
	writeTestFile(t, filepath.Join(layers, key, "etc/motd"), "x")
	events := recordSyncs(t, func(string) {
		if _, err := os.Stat(filepath.Join(scratch, "etc/motd")); err != nil {
			t.Errorf("at the directory sync: %v, want the tree whole under its scratch name", err)
		}
	})
	if n, err := PruneLayers(cache, nil); err != nil || n != 1 {
		t.Fatalf("PruneLayers = %d, %v; want 1 removed", n, err)
	}
	want := []string{"rename " + filepath.Join(layers, key) + " -> " + scratch, "syncdir " + layers}
	if !slices.Equal(*events, want) {
		t.Errorf("events %q, want %q", *events, want)
	}
	if entries, _ := os.ReadDir(layers); len(entries) != 0 {
		t.Errorf("left %v", entries)
	}
}

func TestSyncFileSystem(t *testing.T) {
	for _, tt := range []struct {
		name    string
		dir     string
		wantErr bool
	}{
		{"a directory", t.TempDir(), false},
		{"a missing directory", filepath.Join(t.TempDir(), "missing"), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := syncFileSystem(tt.dir)
			if (err != nil) != tt.wantErr || (err != nil && !strings.Contains(err.Error(), tt.dir)) {
				t.Fatalf("err = %v, want an error naming %s: %v", err, tt.dir, tt.wantErr)
			}
		})
	}
}
