# damselfly build and test entry points. `make test` is what CI runs (via
# .ci/run): it installs the system packages the tests use when they are
# missing, then runs every test, FUSE and multi-process ones included, with
# skips turned into failures.

export PATH := $(PATH):/usr/local/go/bin
GO ?= go
SYSTEM_PACKAGES := umoci skopeo docker-registry fuse3
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
# crasher reproduces it); one that saved nothing is the fuzz engine itself
# (a worker that a loaded machine starved), and that target gets one more
# run.
fuzz-short:
	@$(GO) list -f '{{.ImportPath}} {{.Dir}}' ./... | while read pkg dir; do \
		for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/func //'); do \
			echo "fuzz $$pkg $$f"; \
			before=$$(ls $$dir/testdata/fuzz/$$f 2>/dev/null | wc -l); \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime 5s $$pkg && continue; \
			after=$$(ls $$dir/testdata/fuzz/$$f 2>/dev/null | wc -l); \
			if [ "$$after" != "$$before" ]; then echo "fuzz $$pkg $$f: crasher saved under $$dir/testdata/fuzz/$$f"; exit 1; fi; \
			echo "fuzz $$pkg $$f: failed without a crasher; running it again"; \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime 5s $$pkg || exit 1; \
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
