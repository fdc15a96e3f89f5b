package hostlist

import (
	"slices"
	"strings"
	"testing"
)

func TestExpand(t *testing.T) {
	tests := []struct {
		name    string
		lists   []string
		want    []string
		wantErr string
	}{
		{"one name", []string{"master"}, []string{"master"}, ""},
		{"a range", []string{"c[1-4]"}, []string{"c1", "c2", "c3", "c4"}, ""},
		{"ranges and numbers", []string{"c[1-2,7,10-11]"}, []string{"c1", "c2", "c7", "c10", "c11"}, ""},
		{"names and lists, as Slurm passes them", []string{"master,c[3-4]", "c1"}, []string{"master", "c3", "c4", "c1"}, ""},
		{"repeats once", []string{"c[1-2],c2", "c1"}, []string{"c1", "c2"}, ""},
		{"zero padding kept", []string{"n[08-10]"}, []string{"n08", "n09", "n10"}, ""},
		{"a suffix", []string{"rack[1-2]a"}, []string{"rack1a", "rack2a"}, ""},
		{"backwards", []string{"c[4-1]"}, nil, "runs backwards"},
		{"not a number", []string{"c[a-2]"}, nil, `"a" is not a number`},
		{"unclosed", []string{"c[1-2"}, nil, "'[' without ']'"},
		{"unopened", []string{"c1-2]"}, nil, "']' without '['"},
		{"nested", []string{"c[1-[2]]"}, nil, "brackets inside brackets"},
		{"two brackets", []string{"r[1-2]c[1-2]"}, nil, "one bracket per name"},
		{"empty item", []string{"c1,,c2"}, nil, "an empty name"},
		{"empty bracket", []string{"c[]"}, nil, "an empty bracket"},
		{"upper case", []string{"C1"}, nil, "not a host name"},
		{"a space", []string{"c1 c2"}, nil, "not a host name"},
		{"too many", []string{"c[1-999999999]"}, nil, "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Expand(tt.lists...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Expand(%q) = %q, %v; want an error with %q", tt.lists, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("Expand(%q) = %q, %v; want %q", tt.lists, got, err, tt.want)
			}
		})
	}
}
