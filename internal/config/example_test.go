package config_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/labcluster/gpucluster/internal/config"
)

// A lab that differs from the reference lab in a few keys: a gateway and
// DNS server, a domain, and room for 24 compute nodes named node1..node24.
func Example() {
	dir, _ := os.MkdirTemp("", "bootd")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "bootd.toml")
	os.WriteFile(path, []byte(`
interface = "eth1"

[network]
gateway = "10.80.0.1"
dns = ["10.80.0.1"]
domain = "lab.example"

[compute]
prefix = "node"
max_nodes = 24
`), 0o644)

	c, err := config.Load(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := c.Validate(netip.MustParseAddr("10.80.0.2")); err != nil {
		fmt.Println(err)
		return
	}
	for _, name := range []string{"master", "node1", "node24", "node25"} {
		p, err := c.Place(name)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(p.Name, p.Role, p.Address, p.Image)
	}
	// Output:
	// master master 10.80.0.100 master
	// node1 compute 10.80.0.101 compute
	// node24 compute 10.80.0.124 compute
	// name "node25" fits no role: use "master" or node1..node24 (compute.max_nodes is 24)
}

// Errors name the file, the line and the key.
func ExampleLoad_error() {
	dir, _ := os.MkdirTemp("", "bootd")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "bootd.toml")
	os.WriteFile(path, []byte("[network]\nsubnet = \"10.80.0/24\"\n"), 0o644)

	_, err := config.Load(path)
	fmt.Println(err.(*config.Error).Line, err.(*config.Error).Key)
	// Output:
	// 2 network.subnet
}
