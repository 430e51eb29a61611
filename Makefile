# damselfly build and test entry points. `make test` is what CI runs (via
# .ci/run): it installs the system packages the tests use when they are
# missing, then runs every test, FUSE and multi-process ones included, with
# skips turned into failures.
#
# `make bench` runs every benchmark harness (convert, mount, distribution,
# deployed, pulls, snapshotter; about 130 minutes, as root for the mount,
# deployed, pulls and snapshotter harnesses), each writing its rows to
# integration/bench/out/{convert,mount,distribution,deployed,pulls,snapshotter}.{json,md},
# then regenerates integration/bench/RESULTS.md from them. The harnesses
# can also run alone: make bench-convert, bench-mount, bench-distribution,
# bench-deployed, bench-pulls, bench-snapshotter, and make bench-results
# rewrites RESULTS.md from whatever is in out/.

export PATH := $(PATH):/usr/local/go/bin
GO ?= go
SYSTEM_PACKAGES := umoci skopeo docker-registry fuse3 containerd runc erofs-utils
FUZZTIME ?= 10s

.PHONY: build test deps vet unit fuzz fuzz-short bench-convert clean

build:
	$(GO) build -o bin/damselfly ./cmd/damselfly

deps:
	@missing=""; for p in $(SYSTEM_PACKAGES); do \
		dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }

# Every test; DAMSELFLY_TEST_DISALLOW_SKIP makes a test that would skip for a
# missing tool, root or /dev/fuse fail instead.
test: deps vet
	DAMSELFLY_TEST_DISALLOW_SKIP=1 $(GO) test -race -count=1 -timeout 20m ./...
	$(MAKE) fuzz-short

# A few seconds of each fuzz target over its committed seed corpus. A
# failure that saved a crasher under testdata/fuzz fails at once (the
# crasher reproduces it). One that saved nothing, "context deadline
# exceeded" at the -fuzztime limit, is a race in Go's fuzz coordinator
# (golang/go#75804, fixed in Go 1.27): it hit about one target in 25 per
# run here, so such a target gets up to two more runs, and fails only if
# all three do.
fuzz-short:
	@$(GO) list -f '{{.ImportPath}} {{.Dir}}' ./... | while read pkg dir; do \
		for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/func //'); do \
			for try in 1 2 3; do \
				echo "fuzz $$pkg $$f (run $$try)"; \
				before=$$(ls $$dir/testdata/fuzz/$$f 2>/dev/null | wc -l); \
				$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime 5s $$pkg && break; \
				after=$$(ls $$dir/testdata/fuzz/$$f 2>/dev/null | wc -l); \
				if [ "$$after" != "$$before" ]; then echo "fuzz $$pkg $$f: crasher saved under $$dir/testdata/fuzz/$$f"; exit 1; fi; \
				if [ $$try = 3 ]; then echo "fuzz $$pkg $$f: failed three times without a crasher"; exit 1; fi; \
				echo "fuzz $$pkg $$f: failed without a crasher; running it again"; \
			done; \
		done; \
	done

fuzz:
	@$(GO) list -f '{{.ImportPath}} {{.Dir}}' ./... | while read pkg dir; do \
		for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/func //'); do \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

# Converter benchmarks against eStargz (about 15 minutes; the first run also
# downloads Debian packages and builds the images into integration/bench/out).
# Flags, e.g. BENCH_FLAGS="-runs 5 -big-bytes 0": go run ./integration/bench/convert -h
BENCH_FLAGS ?=
bench-convert:
	$(GO) run ./integration/bench/convert $(BENCH_FLAGS)

clean:
	rm -rf bin

# Mount daemon benchmarks against pull + unpack, through a shaped link
# (about 20 minutes, as root; the first run also builds the images).
# Flags, e.g. BENCH_MOUNT_FLAGS=-quick: go run ./integration/bench/mount -h
.PHONY: bench-mount
BENCH_MOUNT_FLAGS ?=
bench-mount: ; $(GO) run ./integration/bench/mount $(BENCH_MOUNT_FLAGS)

# P2P distribution benchmarks (issues 4 and 5; about 15 minutes): N peer
# daemons, a scheduler and an origin registry in one process on loopback,
# every link shaped, all nodes pulling one image at once. Each scenario
# replaces its own row in integration/bench/out/distribution.json. The
# 20 Mbit/s pair needs little CPU, so it shows the schedule rather than
# the machine: nodes reading in the same order, and in spread orders.
# Flags, e.g. BENCH_DIST_FLAGS="-runs 5 -rtt 2ms": go run ./integration/bench/distribution -h
.PHONY: bench bench-distribution bench-results
BENCH_DIST_FLAGS ?=
BENCH_DIST = $(GO) run ./integration/bench/distribution
bench-distribution:
	$(BENCH_DIST) -nodes 1 -mb 64 -mbit 200 -p2p=true -runs 3 $(BENCH_DIST_FLAGS)
	$(BENCH_DIST) -nodes 1 -mb 64 -mbit 200 -p2p=false -runs 3 $(BENCH_DIST_FLAGS)
	$(BENCH_DIST) -nodes 4 -mb 64 -mbit 200 -p2p=true -runs 3 $(BENCH_DIST_FLAGS)
	$(BENCH_DIST) -nodes 4 -mb 64 -mbit 200 -p2p=false -runs 3 $(BENCH_DIST_FLAGS)
	$(BENCH_DIST) -nodes 8 -mb 64 -mbit 200 -p2p=true -runs 3 $(BENCH_DIST_FLAGS)
	$(BENCH_DIST) -nodes 8 -mb 64 -mbit 200 -p2p=false -runs 3 $(BENCH_DIST_FLAGS)
	$(BENCH_DIST) -nodes 16 -mb 256 -mbit 200 -p2p=true -runs 3 $(BENCH_DIST_FLAGS)
	$(BENCH_DIST) -nodes 8 -mb 16 -mbit 20 -p2p=true -runs 3 $(BENCH_DIST_FLAGS)
	$(BENCH_DIST) -nodes 8 -mb 16 -mbit 20 -p2p=true -spread -runs 3 $(BENCH_DIST_FLAGS)

bench-results:
	$(BENCH_DIST) -results integration/bench/RESULTS.md

bench: bench-convert bench-mount bench-distribution bench-deployed bench-pulls bench-snapshotter
	$(MAKE) bench-results

# The distribution benchmark deployed as users deploy (issue 24; about 65
# minutes, as root): docker-registry, damselfly scheduler, and per node
# damselfly peer and damselfly mount as separate processes, each node in
# its own network namespace with its link capped by tc at 200 Mbit/s; 1, 4
# and 8 nodes read the Debian Python/NumPy/SciPy image (every file, and
# the Python import) through their FUSE mounts, P2P and registry-only in
# the same run, beside a plain pull of the same image on every node
# (skopeo copy + umoci unpack, then the same readers on the tree: the CPU
# baseline of issue 24). Writes integration/bench/out/deployed.{json,md}.
# Flags, e.g. BENCH_DEPLOYED_FLAGS="-image sample -nodes 1,4 -runs 1":
# go run ./integration/bench/deployed -h
.PHONY: bench-deployed
BENCH_DEPLOYED_FLAGS ?=
bench-deployed: ; $(GO) run ./integration/bench/deployed $(BENCH_DEPLOYED_FLAGS)

# Plain pulls through the peers' mirrors (issue 21; about 15 minutes, as
# root): docker-registry with an ordinary gzip OCI image (the Debian
# image's layers and two of 200 MiB, 624 MiB), damselfly scheduler, and
# per node a damselfly peer, each in its own network namespace with its
# link capped by tc at 200 Mbit/s; 1, 4 and 8 nodes run skopeo copy from
# their own mirror at once, P2P and with no P2P in the same run. Writes
# integration/bench/out/pulls.{json,md}.
# Flags, e.g. BENCH_PULLS_FLAGS="-nodes 4,8 -runs 3": go run ./integration/bench/pulls -h
.PHONY: bench-pulls
BENCH_PULLS_FLAGS ?=
bench-pulls: ; $(GO) run ./integration/bench/pulls $(BENCH_PULLS_FLAGS)

# Load soak (issue 7; 10 minutes plus setup, as root): a docker-registry,
# a scheduler, 3 peer daemons with node caches a quarter of the working
# set, and FUSE mounts of 4 generated images on every node, all on
# loopback; 12 readers compare every byte with the source while RSS, fds,
# goroutines and cache sizes are sampled every 30 s. Writes
# integration/soak/out/soak.{md,json} and fails on any failed or wrong
# read, a cache over its bound, or a daemon that grew.
# Flags, e.g. SOAK_FLAGS="-duration 30m -readers 16": go run ./integration/soak -h
.PHONY: soak
SOAK_FLAGS ?=
soak: ; $(GO) run ./integration/soak $(SOAK_FLAGS)

# Container start through damselfly snapshotter (issue 22; about 10
# minutes, as root): containerd (Debian's) pulls the Debian
# Python/NumPy/SciPy image from docker-registry over a shaped link (200
# Mbit/s and 1 Gbit/s) and runs `import numpy, scipy`; RAFS through the
# snapshotter (converted with the defaults, and with the import's files as
# --prefetch-patterns) against overlayfs with a full pull, in rotating
# order, each run cold. Writes integration/bench/out/snapshotter.{json,md}.
# Flags, e.g. BENCH_SNAPSHOTTER_FLAGS="-runs 5 -links 200m":
# go run ./integration/bench/snapshotter -h
.PHONY: bench-snapshotter
BENCH_SNAPSHOTTER_FLAGS ?=
bench-snapshotter: ; $(GO) run ./integration/bench/snapshotter $(BENCH_SNAPSHOTTER_FLAGS)
