package kickstart_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/labcluster/gpucluster/internal/kickstart"
	"github.com/labcluster/gpucluster/internal/resolve"
	"github.com/labcluster/gpucluster/internal/spec"
)

// layerNamed returns the plan's layer name.
func layerNamed(t *testing.T, p *spec.Plan, name string) *spec.Layer {
	t.Helper()
	for _, l := range p.Layers {
		if l.Name == name {
			return l
		}
	}
	t.Fatalf("no layer %s", name)
	return nil
}

// TestImageRefuses: what cannot be written safely is an error naming the layer and the field.
func TestImageRefuses(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, p *spec.Plan, lock *resolve.LockFile)
		want   string
	}{
		{"image kernel arg with a quote", func(t *testing.T, p *spec.Plan, _ *resolve.LockFile) {
			p.Image.KernelArgs = append(p.Image.KernelArgs, `x="y"`)
		}, `image compute: kernel_args[2]: "x=\"y\"" has a double quote`},
		{"layer kernel arg with a backslash", func(t *testing.T, p *spec.Plan, _ *resolve.LockFile) {
			layerNamed(t, p, "nvidia-cuda").KernelArgs[1] = `a\b`
		}, "layer nvidia-cuda: kernel_args[1]:"},
		{"user comment with a quote", func(t *testing.T, p *spec.Plan, _ *resolve.LockFile) {
			layerNamed(t, p, "munge").Users[0].Comment = `say "hi"`
		}, "layer munge: users[0].comment:"},
		{"repo url with a quote", func(t *testing.T, p *spec.Plan, _ *resolve.LockFile) {
			layerNamed(t, p, "epel").Repos[0].BaseURL = `http://x/"`
		}, "repo epel: baseurl:"},
		{"command line read as a section", func(t *testing.T, p *spec.Plan, _ *resolve.LockFile) {
			layerNamed(t, p, "base").Run[0].Command = "true\n  %end\n"
		}, "layer base: run[0].command: line 2 starts with %"},
		{"file path with a line break", func(t *testing.T, p *spec.Plan, _ *resolve.LockFile) {
			layerNamed(t, p, "base").Files[1].Path = "/etc/x\n%end"
		}, "layer base: files[1]"},
		{"escaped unit", func(t *testing.T, p *spec.Plan, _ *resolve.LockFile) {
			layerNamed(t, p, "chrony").Services.Enable[0] = `dev-disk\x2dx.swap`
		}, "layer chrony: services.enable[0]:"},
		{"package name that is not one word", func(t *testing.T, _ *spec.Plan, lock *resolve.LockFile) {
			lock.Layers[0].Packages[0].Release = "1 2"
		}, "layer base: locked package"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := realPlan(t, "compute")
			lock := fakeLock(p)
			tt.change(t, p, lock)
			lock.SpecDigest = "sha256:" + p.LockDigest() // the image's own fields are in it
			_, err := render(t, p, lock, templates)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestImageRefusesStaleLock: a lock of another image, or one whose layers are not the image's
// one to one (a hand edit or a bad merge that kept spec_digest), is refused, not rendered.
func TestImageRefusesStaleLock(t *testing.T) {
	tests := []struct {
		name   string
		change func(lock *resolve.LockFile)
	}{
		{"lock of another image", func(lock *resolve.LockFile) { *lock = *fakeLock(realPlan(t, "master")) }},
		{"a layer fewer", func(lock *resolve.LockFile) { lock.Layers = lock.Layers[:len(lock.Layers)-1] }},
		{"layers reordered", func(lock *resolve.LockFile) { lock.Layers[0], lock.Layers[1] = lock.Layers[1], lock.Layers[0] }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := realPlan(t, "compute")
			lock := fakeLock(p)
			tt.change(lock)
			var stale *resolve.StaleError
			if _, err := render(t, p, lock, templates); !errors.As(err, &stale) {
				t.Errorf("error %v, want a stale lock", err)
			}
		})
	}
}

func TestNodeRefuses(t *testing.T) {
	p := realPlan(t, "compute")
	body, err := render(t, p, fakeLock(p), templates)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		change func(n *kickstart.NodeInfo)
		want   string
	}{
		{"role of another image", func(n *kickstart.NodeInfo) { n.Role = "master" }, "not a kickstart of a master image"},
		{"bad mac", func(n *kickstart.NodeInfo) { n.MAC = "52:54:00:aa:00" }, "mac"},
		{"bad name", func(n *kickstart.NodeInfo) { n.Name = "c1 --password=x" }, "name"},
		{"bad netmask", func(n *kickstart.NodeInfo) { n.Netmask = netip.MustParseAddr("255.0.255.0") }, "netmask"},
		{"IPv6 address", func(n *kickstart.NodeInfo) { n.Address = netip.MustParseAddr("fd00::1") }, "address"},
		{"bootd url with a blank", func(n *kickstart.NodeInfo) { n.BootdURL = "http://10.80.0.1/a b" }, "bootd url"},
		{"bootd url with a quote", func(n *kickstart.NodeInfo) { n.BootdURL = `http://10.80.0.1/"` }, "bootd url"},
		{"bad domain", func(n *kickstart.NodeInfo) { n.Domain = "lab..example" }, "domain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := nodes["c1"]
			tt.change(&n)
			_, err := kickstart.Node(body, n, templates)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
