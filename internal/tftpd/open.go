package tftpd

import "os"

// Open returns the iPXE binary called name under the same rules as a TFTP read: only the
// allowed binaries, only inside the iPXE directory. bootd's HTTP listener uses it for UEFI
// HTTP boot, so both protocols serve exactly the same files.
func (s *Server) Open(name string) (*os.File, error) {
	clean, err := CleanPath(name)
	if err != nil {
		return nil, err
	}
	f, _, err := open(s.root, clean)
	return f, err
}
