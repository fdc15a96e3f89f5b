// Command reporter is the vlab test image's hardware report: it posts a JSON body to bootd's node
// API (POST /api/v1/node/hardware) from a privileged source port, as a node's bootd-node does with
// curl --local-port, which the image's busybox cannot (its nc binds a local port only to
// listen). It prints the status line. Built static into the image by WriteTestImages.
//
//	reporter HOST:PORT JSON
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: reporter HOST:PORT JSON")
		os.Exit(2)
	}
	addr, body := os.Args[1], os.Args[2]
	conn, err := dialPrivileged(addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reporter:", err)
		os.Exit(1)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "POST /api/v1/node/hardware HTTP/1.0\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body)
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		fmt.Fprintln(os.Stderr, "reporter:", err)
		os.Exit(1)
	}
	fmt.Print(status)
}

// dialPrivileged connects from the first free port below 1024, from 1023 down.
func dialPrivileged(addr string) (net.Conn, error) {
	var last error
	for port := 1023; port >= 600; port-- {
		d := net.Dialer{LocalAddr: &net.TCPAddr{Port: port}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp4", addr)
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}
