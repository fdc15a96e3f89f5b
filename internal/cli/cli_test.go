package cli

import (
	"flag"
	"slices"
	"testing"
)

func TestParseInterleaved(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantPos  []string
		wantMAC  string
		wantRepl bool
	}{
		{"flags after the name", []string{"c4", "--mac", "52:54:00:00:00:01"}, []string{"c4"}, "52:54:00:00:00:01", false},
		{"flags before the name", []string{"--mac", "m", "--replace", "c4"}, []string{"c4"}, "m", true},
		{"mixed", []string{"--replace", "c4", "--mac=m"}, []string{"c4"}, "m", true},
		{"two names", []string{"c4", "c5"}, []string{"c4", "c5"}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			mac := fs.String("mac", "", "")
			repl := fs.Bool("replace", false, "")
			pos, err := ParseInterleaved(fs, tt.args)
			if err != nil || !slices.Equal(pos, tt.wantPos) || *mac != tt.wantMAC || *repl != tt.wantRepl {
				t.Fatalf("got %v mac=%q replace=%v err=%v", pos, *mac, *repl, err)
			}
		})
	}
}

func TestParseInterleavedRefusesUnknownFlags(t *testing.T) {
	if _, err := ParseInterleaved(NewFlagSet("t", ""), []string{"c4", "--nope"}); err == nil {
		t.Error("an unknown flag was accepted")
	}
}
