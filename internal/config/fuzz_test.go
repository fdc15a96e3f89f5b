package config

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad feeds Load arbitrary files: it must not panic, and whatever it
// accepts must be valid. The corpus under testdata/fuzz/FuzzLoad seeds it,
// with the bad test files and the example added here.
func FuzzLoad(f *testing.F) {
	files, _ := filepath.Glob("testdata/bad/*.toml")
	for _, file := range append(files, exampleFile) {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	path := filepath.Join(f.TempDir(), "bootd.toml")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := Load(path)
		var e *Error
		if err != nil {
			if !errors.As(err, &e) || e.File != path {
				t.Errorf("error %q does not name the file", err)
			}
			return
		}
		if err := c.Validate(netip.Addr{}); err != nil {
			t.Errorf("Load accepted a config that Validate refuses: %v", err)
		}
		c.origin = nil
		if err := c.Validate(netip.Addr{}); err != nil {
			t.Errorf("Validate depends on where values came from: %v", err)
		}
		checkPlaces(t, c)
	})
}

// checkPlaces wants the first and last node of each role placed inside the
// subnet and outside the discovery pool.
func checkPlaces(t *testing.T, c Config) {
	t.Helper()
	for _, name := range []string{c.Master.Name, c.ComputeName(1), c.ComputeName(c.Compute.MaxNodes)} {
		p, err := c.Place(name)
		if err != nil {
			t.Errorf("Place(%q) in a valid config: %v", name, err)
			continue
		}
		if !c.Network.Subnet.Contains(p.Address) || c.InPool(p.Address) {
			t.Errorf("Place(%q) = %s: outside the subnet or in the pool", name, p.Address)
		}
	}
}
