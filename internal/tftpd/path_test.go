package tftpd

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestCleanPath(t *testing.T) {
	tests := []struct {
		path string
		want string // "" means refused
	}{
		{"undionly.kpxe", "undionly.kpxe"},
		{"/undionly.kpxe", "undionly.kpxe"},
		{"ipxe.efi", "ipxe.efi"},
		{"/snponly.efi", "snponly.efi"},
		{"", ""},
		{"/", ""},
		{"//ipxe.efi", ""},
		{"./ipxe.efi", ""},
		{"../ipxe.efi", ""},
		{"pxelinux/../undionly.kpxe", ""},
		{"/ipxe/ipxe.efi", ""},
		{`\ipxe.efi`, ""},
		{`..\ipxe.efi`, ""},
		{"ipxe.efi\x00", ""},
		{"ipxe.efi\x00.png", ""},
		{"ipxe.efi/", ""},
		{"ipxe.efi ", ""},
		{"IPXE.EFI", ""},
		{"pxelinux.0", ""},
		{"undionly.kkpxe", ""},
		{"/etc/passwd", ""},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			got, err := CleanPath(tt.path)
			if tt.want == "" {
				if !errors.Is(err, ErrNotAllowed) {
					t.Fatalf("CleanPath(%q) = %q, %v; want ErrNotAllowed", tt.path, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("CleanPath(%q) = %q, %v; want %q", tt.path, got, err, tt.want)
			}
		})
	}
}

// FuzzCleanPath: whatever the client sends, an accepted path maps to one of
// the Allowed names and never to anything with a separator or "..".
func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"undionly.kpxe", "/ipxe.efi", "../ipxe.efi", `\snponly.efi`, "a/../ipxe.efi", "ipxe.efi\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		name, err := CleanPath(p)
		if err != nil {
			if name != "" {
				t.Fatalf("CleanPath(%q) returned %q with error %v", p, name, err)
			}
			return
		}
		if !slices.Contains(Allowed, name) || strings.ContainsAny(name, "/\\\x00") || strings.Contains(name, "..") {
			t.Fatalf("CleanPath(%q) = %q", p, name)
		}
		if strings.TrimPrefix(p, "/") != name {
			t.Fatalf("CleanPath(%q) = %q: accepted a path that is not the name", p, name)
		}
	})
}
