# bootd + imgbuild. Run `make help` for the targets.
export PATH := /usr/local/go/bin:$(PATH)
GO       ?= go
BIN      := bin
E2E_TIME ?= 35m
# FUZZTIME (e.g. 60s or 100000x) overrides every fuzz target's own budget below.
FUZZTIME ?=

.PHONY: help build test check lint fuzz e2e bench demo deps clean ci-pipeline

help:
	@echo "make demo    set up this Debian machine and watch PCs netboot through bootd in a virtual lab (root)"
	@echo "make check   everything CI runs: lint, unit tests, short fuzzing, QEMU end-to-end suite (root)"
	@echo "make build   build bin/bootd, bin/imgbuild and bin/bootd-fetch (the nodes' fetch program, static)"
	@echo "make bench   boot storm, root storm by chunks at a shaped link's limit, image builds, squashfs packing and overlay rendering, each against a baseline in the same run (root)"
	@echo "make test    unit and loopback tests (fast)"
	@echo "make e2e     end-to-end suites: QEMU PXE boots through bootd and dnsmasq, imgbuild with the real dnf (root, about 15 min: three shards side by side)"
	@echo "make ci-pipeline  run ci/pipeline.yml's steps in a fresh Debian 12 root made with debootstrap (root, network to Debian's archive and the Go proxy, several minutes; not in check)"
	@echo "make fuzz    run each fuzz target for its execution budget, about 10 s each (FUZZTIME=60s overrides)"

build:
	$(GO) build -trimpath -o $(BIN)/bootd ./cmd/bootd
	$(GO) build -trimpath -o $(BIN)/imgbuild ./cmd/imgbuild
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags=-s -o $(BIN)/bootd-fetch ./cmd/bootd-fetch

test:
	$(GO) test ./...

lint:
	@test -z "$$(gofmt -l . | tee /dev/stderr)" || { echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...
	$(GO) vet -tags e2e ./e2e/

# Each fuzz target runs alone (go test -fuzz takes one target per package run), for a budget of
# executions, about 10 s each on the CI machine, rather than a duration: with a duration Go 1.26's
# fuzz coordinator can fail a run that found nothing ("context deadline exceeded" at the
# -fuzztime boundary: golang/go#75804, fixed in Go 1.27), and did so in CI here.
FUZZ_TARGETS := \
	./internal/config:FuzzLoad:20000x \
	./internal/dhcpd:FuzzReply:200000x \
	./internal/tftpd:FuzzCleanPath:200000x \
	./internal/httpd:FuzzRequestPath:20000x \
	./internal/artifact:FuzzOpenManifest:40000x \
	./internal/spec:FuzzLoadLayer:40000x \
	./internal/spec:FuzzLoadImage:30000x \
	./internal/spec:FuzzLoadSite:20000x \
	./internal/tomlpos:FuzzPaths:200000x

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; fn=$${rest%%:*}; budget=$${rest#*:}; \
		$(if $(FUZZTIME),budget=$(FUZZTIME);) \
		echo "fuzz $$pkg $$fn ($$budget)"; \
		$(GO) test $$pkg -run '^$$' -fuzz "^$$fn$$" -fuzztime $$budget; \
	done

# Shards side by side: scripts/e2e.sh says why and which.
e2e: deps build
	./scripts/e2e.sh $(E2E_TIME)

check: deps lint test fuzz e2e

# The image pipeline's steps on a clean Debian 12 (e2e/pipeline_test.go): not in check, since it
# downloads a Debian root and Go (several minutes).
ci-pipeline: deps
	$(GO) test -tags e2e,pipeline -count=1 -timeout 45m -v -run TestPipelineDebian12 ./e2e/

bench: deps build
	$(GO) test -run '^$$' -bench PackVsMksquashfs -benchtime 1x ./internal/pack
	$(GO) test -run '^$$' -bench Render -benchtime 50x ./internal/bootd
	$(GO) run ./bench/imgbuild --out $(BIN)/imgbuild-bench.md
	$(GO) run ./bench/bootstorm --bootd $(BIN)/bootd --out $(BIN)/bootstorm.md
	$(GO) run ./bench/rootstorm --bootd $(BIN)/bootd --out $(BIN)/rootstorm.md

deps:
	./scripts/setup-debian.sh

demo: deps build
	$(GO) run ./cmd/vlab demo --bootd $(BIN)/bootd

clean:
	rm -rf $(BIN)
