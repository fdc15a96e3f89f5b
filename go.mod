module github.com/labcluster/gpucluster

go 1.26.0

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/insomniacslk/dhcp v0.0.0-20260901064844-234b97448fae
	github.com/mdlayher/packet v1.1.2
	github.com/pin/tftp/v3 v3.2.0
	github.com/sirupsen/logrus v1.10.2
	golang.org/x/net v0.55.0
	golang.org/x/sync v0.24.0
	golang.org/x/sys v0.45.0
	golang.org/x/term v0.43.0
)

require (
	github.com/josharian/native v1.1.0 // indirect
	github.com/mdlayher/socket v0.4.1 // indirect
	github.com/pierrec/lz4/v4 v4.1.14 // indirect
	github.com/u-root/uio v0.0.0-20230220225925-ffce2a382923 // indirect
)
