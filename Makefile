# bootd + imgbuild. Run `make help` for the targets.
export PATH := /usr/local/go/bin:$(PATH)
GO       ?= go
BIN      := bin
E2E_TIME ?= 25m
FUZZTIME ?= 10s

.PHONY: help build test check lint fuzz e2e bench demo deps clean

help:
	@echo "make demo    set up this Debian machine and watch PCs netboot through bootd in a virtual lab (root)"
	@echo "make check   everything CI runs: lint, unit tests, short fuzzing, QEMU end-to-end suite (root)"
	@echo "make build   build bin/bootd and bin/imgbuild"
	@echo "make bench   squashfs packing throughput against plain mksquashfs on the same tree"
	@echo "make test    unit and loopback tests (fast)"
	@echo "make e2e     end-to-end suites: QEMU PXE boots through bootd and dnsmasq, imgbuild with the real dnf (root, ~6 min)"
	@echo "make fuzz    run each fuzz target for FUZZTIME ($(FUZZTIME))"

build:
	$(GO) build -trimpath -o $(BIN)/bootd ./cmd/bootd
	$(GO) build -trimpath -o $(BIN)/imgbuild ./cmd/imgbuild

test:
	$(GO) test ./...

lint:
	@test -z "$$(gofmt -l . | tee /dev/stderr)" || { echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...
	$(GO) vet -tags e2e ./e2e/

# Each fuzz target runs alone (go test -fuzz takes one target per package run).
FUZZ_TARGETS := \
	./internal/config:FuzzLoad \
	./internal/dhcpd:FuzzReply \
	./internal/tftpd:FuzzCleanPath \
	./internal/httpd:FuzzRequestPath \
	./internal/artifact:FuzzOpenManifest \
	./internal/spec:FuzzLoadLayer \
	./internal/spec:FuzzLoadImage \
	./internal/spec:FuzzLoadSite

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "fuzz $$pkg $$fn ($(FUZZTIME))"; \
		$(GO) test $$pkg -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME); \
	done

e2e: deps build
	$(GO) test -tags e2e -count=1 -timeout $(E2E_TIME) -v ./e2e/

check: deps lint test fuzz e2e

bench: deps build
	$(GO) test -run '^$$' -bench PackVsMksquashfs -benchtime 1x ./internal/pack
	$(GO) run ./bench/bootstorm --bootd $(BIN)/bootd --out $(BIN)/bootstorm.md

deps:
	./scripts/setup-debian.sh

demo: deps build
	$(GO) run ./cmd/vlab demo --bootd $(BIN)/bootd

clean:
	rm -rf $(BIN)
