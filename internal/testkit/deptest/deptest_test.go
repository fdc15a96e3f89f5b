package deptest

import (
	"slices"
	"testing"
)

// TestViolations: a forbidden package is found however deep it sits, with
// the chain that reaches it; a package that only shares a prefix is not.
func TestViolations(t *testing.T) {
	g := Graph{
		"cmd/a":      {"lib/one", "lib/two"},
		"lib/one":    {"lib/deep"},
		"lib/two":    {"lib/onefold"},
		"lib/deep":   {"test/kit/x"},
		"test/kit/x": nil,
	}
	tests := []struct {
		name      string
		forbidden []string
		want      []string
	}{
		{"nothing forbidden reached", []string{"other"}, nil},
		{"direct import", []string{"lib/two"}, []string{"r: cmd/a -> lib/two"}},
		{"deep import", []string{"test/kit"}, []string{"r: cmd/a -> lib/one -> lib/deep -> test/kit/x"}},
		{"prefix of a name is not a parent", []string{"lib/one"}, []string{"r: cmd/a -> lib/one"}},
		{"several", []string{"lib/deep", "lib/onefold"}, []string{"r: cmd/a -> lib/two -> lib/onefold", "r: cmd/a -> lib/one -> lib/deep"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := g.Violations(Rule{Name: "r", From: "cmd/a", Forbidden: tt.forbidden})
			slices.Sort(got)
			slices.Sort(tt.want)
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
