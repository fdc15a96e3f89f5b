package artifact

import "testing"

func TestCompareVersions(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"2026.11.21-10", "2026.11.21-9", 1},
		{"2026.11.21-9", "2026.11.21-10", -1},
		{"2026.11.21-1", "2026.11.21-1", 0},
		{"2026.11.22-1", "2026.11.21-9", 1},
		{"1.10", "1.9", 1},
		{"1.0", "1.0.1", -1},
		{"v2", "v10", -1},
		{"01", "1", -1}, // equal as numbers: byte order keeps the order total
		{"1a", "1b", -1},
		{"20261121", "2026112", 1},
	}
	for _, tt := range tests {
		t.Run(tt.a+"_vs_"+tt.b, func(t *testing.T) {
			if got := compareVersions(tt.a, tt.b); got != tt.want {
				t.Fatalf("compareVersions(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
			}
		})
	}
}
