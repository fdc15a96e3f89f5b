package testrepo

import (
	"strings"
	"testing"
)

func TestUnitsFor(t *testing.T) {
	tests := []struct{ name, want string }{
		{"munge", "munge"},
		{"chrony", "chronyd"},
		{"slurm-slurmd", "slurmd"},
		{"slurm-slurmctld", "slurmctld"},
		{"chronyd", "chronyd"},
		{"slurm", ""},
		{"bash", ""},
		{"nfs-utils", "nfs-server rpcbind"},
	}
	for _, tt := range tests {
		if got := strings.Join(unitsFor(tt.name), " "); got != tt.want {
			t.Errorf("unitsFor(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestKernelVersion(t *testing.T) {
	tests := []struct{ rel, v, r string }{
		{"6.1.0-56-amd64", "6.1.0", "56.el9"},
		{"5.14.0", "5.14.0", "1.el9"},
	}
	for _, tt := range tests {
		if v, r := kernelVersion(tt.rel); v != tt.v || r != tt.r {
			t.Errorf("kernelVersion(%q) = %s, %s", tt.rel, v, r)
		}
	}
}

func TestCheckRefusesBadInput(t *testing.T) {
	tests := []struct {
		p    Package
		want string
	}{
		{Package{Name: "a b"}, "package name"},
		{Package{Name: "a", Version: "1-2"}, "no dashes"},
		{Package{Name: "a", Files: map[string]string{"rel/path": ""}}, "clean absolute"},
		{Package{Name: "a", Files: map[string]string{"/a b": ""}}, "spaces"},
		{Package{Name: "a", Requires: []string{"b,c"}}, "commas"},
	}
	for _, tt := range tests {
		err := tt.p.withDefaults().check()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: err %v, want %q", tt.p, err, tt.want)
		}
	}
}
