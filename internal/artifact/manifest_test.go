package artifact

import (
	"strings"
	"testing"
	"time"
)

func validManifest() Manifest {
	m := testManifest("compute", "2026.11.21-1")
	m.Files = map[string]File{}
	for _, ref := range m.Referenced() {
		m.Files[ref] = File{Size: 1, SHA256: emptySHA256}
	}
	return m
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Manifest)
		want   string // substring of the error; "" means valid
	}{
		{"valid", func(*Manifest) {}, ""},
		{"no rootfs", func(m *Manifest) { m.Rootfs = nil }, ""},
		{"extra listed file", func(m *Manifest) { m.Files["extra.img"] = File{SHA256: emptySHA256} }, ""},
		{"empty name", func(m *Manifest) { m.Name = "" }, "name is missing"},
		{"dot-dot version", func(m *Manifest) { m.Version = ".." }, "starts with '.'"},
		{"hidden version", func(m *Manifest) { m.Version = ".1" }, "starts with '.'"},
		{"inner dot-dot", func(m *Manifest) { m.Version = "1..2" }, `contains ".."`},
		{"slash in version", func(m *Manifest) { m.Version = "a/b" }, "outside"},
		{"absolute name", func(m *Manifest) { m.Name = "/etc" }, "outside"},
		{"non-ascii name", func(m *Manifest) { m.Name = "cömpute" }, "outside"},
		{"long name", func(m *Manifest) { m.Name = strings.Repeat("a", 256) }, "longer than"},
		{"zero created", func(m *Manifest) { m.Created = time.Time{} }, "created is missing"},
		{"no kernel", func(m *Manifest) { m.Kernel.File = "" }, "kernel.file is missing"},
		{"no initrds", func(m *Manifest) { m.Initrds = nil }, "initrds is empty"},
		{"rootfs without format", func(m *Manifest) { m.Rootfs.Format = "" }, "rootfs needs"},
		{"kernel path", func(m *Manifest) { m.Kernel.File = "../vmlinuz" }, "starts with '.'"},
		{"initrd path", func(m *Manifest) { m.Initrds = []string{"boot/initrd"} }, "outside"},
		{"absolute initrd", func(m *Manifest) { m.Initrds = []string{"/initrd"} }, "outside"},
		{"manifest as file", func(m *Manifest) { m.Kernel.File = ManifestFile }, "reserved"},
		{"referenced twice", func(m *Manifest) { m.Initrds = []string{"vmlinuz"} }, "referenced twice"},
		{"unlisted reference", func(m *Manifest) { delete(m.Files, "vmlinuz") }, "not listed"},
		{"listed path", func(m *Manifest) { m.Files["../x"] = File{SHA256: emptySHA256} }, "starts with '.'"},
		{"negative size", func(m *Manifest) { m.Files["vmlinuz"] = File{Size: -1, SHA256: emptySHA256} }, "negative size"},
		{"short sha", func(m *Manifest) { m.Files["vmlinuz"] = File{SHA256: "abc"} }, "64 lowercase hex"},
		{"upper sha", func(m *Manifest) { m.Files["vmlinuz"] = File{SHA256: strings.ToUpper(emptySHA256)} }, "64 lowercase hex"},
		{"layer without digest", func(m *Manifest) { m.Layers = []Layer{{Name: "base"}} }, "layer 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := validManifest()
			tt.change(&m)
			err := m.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want error containing %q", err, tt.want)
			}
		})
	}
}

func TestEncodeStable(t *testing.T) {
	m := validManifest()
	m.Created = created.In(time.FixedZone("CET", 3600))
	m.Layers = nil
	a, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Fatal("two encodings of the same manifest differ")
	}
	for _, want := range []string{`"created": "2026-11-21T12:00:00Z"`, `"layers": []`, "\n  \"name\""} {
		if !strings.Contains(string(a), want) {
			t.Errorf("encoding lacks %q:\n%s", want, a)
		}
	}
}
