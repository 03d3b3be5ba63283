# gpuscaler developer targets. The two that matter:
#   go run ./cmd/gpuscaler simulate   (README, command 1)
#   make test                         (README, command 2)

GO ?= go
STATICCHECK_VERSION ?= v0.8.2
GOLANGCI_LINT_VERSION ?= v2.15.0
# The Karpenter operator (karpenter/, its main in karpenter/cmd/gpuscaler-karpenter)
# is its own Go module:
# Karpenter core v1.15 needs Go >= 1.26.9, which the go command fetches
# from the module proxy for that module only (docs/karpenter.md).
KARPENTER_DIR := karpenter
KARPENTER_GOTOOLCHAIN ?= go1.27.3
KGO = cd $(KARPENTER_DIR) && GOTOOLCHAIN=$(KARPENTER_GOTOOLCHAIN) $(GO)
# The main module is linted and tested on that toolchain too: the two modules
# share most of their dependencies at the same versions, and with one
# compiler the second module's build finds the first's in the build cache
# (cold, the Kubernetes client stack is compiled once per mode, not twice).
# `go run` and `go build` by hand keep the local toolchain.
CHECK_GOTOOLCHAIN ?= $(KARPENTER_GOTOOLCHAIN)
TGO = GOTOOLCHAIN=$(CHECK_GOTOOLCHAIN) $(GO)
# Modules of their own, so that what only they need stays out of gpuscaler's
# go.mod: the end-to-end, chart, chaos, perf and security tests (test/: Helm,
# Prometheus's PromQL parser) and the image builder (hack/image:
# go-containerregistry). Each replaces gpuscaler with this checkout.
SIDE_MODULES := test hack/image

include Makefile.testbins.mk

.PHONY: test e2e-bins test-unit fuzz chaos lint fmt vet staticcheck golangci-lint crds configschema bench build run tools image release

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
PLATFORMS ?= linux/amd64 linux/arm64
LDFLAGS = -s -w -X main.version=$(VERSION)

## test: every test (unit, contract, e2e against a real kube-apiserver), with -race.
## Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok on first use,
## and the binaries the end-to-end tests run before any test starts.
## The end-to-end tests wait on their clusters far more than they compute: up to
## TEST_PARALLEL of them run at once.
TEST_PARALLEL ?= 4
test: tools testbins e2e-bins
	GPUSCALER_TESTBINS="$$($(GO) run ./hack/testbins)"; export GPUSCALER_TESTBINS; export GPUSCALER_BIN=$(E2E_BIN)/gpuscaler; \
	  $(TGO) test -race -count=1 -parallel $(TEST_PARALLEL) -timeout 30m ./... && \
	  for m in $(SIDE_MODULES); do $(TGO) -C $$m test -race -count=1 -parallel $(TEST_PARALLEL) -timeout 30m ./... || exit 1; done
	GPUSCALER_TESTBINS="$$($(GO) run ./hack/testbins)"; export GPUSCALER_TESTBINS; \
	  export GPUSCALER_KARPENTER_BIN=$(E2E_BIN)/gpuscaler-karpenter; $(KGO) test -race -count=1 -parallel $(TEST_PARALLEL) -timeout 20m ./...

## e2e-bins: the gpuscaler binary (stripped) and the Karpenter operator, built from this checkout
## into a folder outside the work tree (one per checkout). Not static as the image's (`make image`):
## with the build settings of `make lint`, it links what lint compiled instead of compiling it all again.
E2E_BIN ?= $(HOME)/.cache/gpuscaler/e2e/$(shell printf '%s' "$(CURDIR)" | sha256sum | cut -c1-12)
e2e-bins:
	@mkdir -p $(E2E_BIN)
	$(TGO) build -ldflags "-s -w" -o $(E2E_BIN)/gpuscaler ./cmd/gpuscaler
	$(KGO) build -o $(E2E_BIN)/gpuscaler-karpenter ./cmd/gpuscaler-karpenter

## tools: system tools Go cannot build (shellcheck, curl), from Debian's packages.
tools:
	@./hack/install-tools.sh

## test-unit: fast inner loop; tests that need the real cluster are skipped with -short.
test-unit:
	$(TGO) test -race -short ./...
	for m in $(SIDE_MODULES); do $(TGO) -C $$m test -race -short ./... || exit 1; done
	$(KGO) test -race -short ./...

## fuzz: every fuzz target for FUZZTIME each (default 60s); `make test` runs their seed corpora.
fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) ./hack/fuzz.sh

## chaos: randomized fault-and-restart campaigns on each cloud: CHAOS_RUNS on the wall clock (default 200) and
## CHAOS_VIRTUAL_RUNS on a virtual clock (default 2000); `make test` runs 2 and 40 each.
CHAOS_RUNS ?= 200
CHAOS_VIRTUAL_RUNS ?= 2000
chaos:
	$(GO) -C test test -count=1 -timeout 0 -run 'TestCampaigns|TestVirtualCampaigns' ./chaos/ \
	  -chaos.runs=$(CHAOS_RUNS) -chaos.virtual-runs=$(CHAOS_VIRTUAL_RUNS)

## lint: gofmt, go vet, staticcheck, golangci-lint (.golangci.yml: goimports, errorlint, importas,
## gocyclo), the CRDs as controller-gen makes them from the API types (every copy:
## deploy/crds, the chart's, the Karpenter operator's), and the chart's schema of `config` as
## test/configschema makes it from the config types (`go -C test run ./configschema` writes it).
lint: fmt vet staticcheck golangci-lint crds configschema

configschema:
	$(TGO) -C test run ./configschema -check

crds:
	@KARPENTER_GOTOOLCHAIN=$(KARPENTER_GOTOOLCHAIN) ./hack/update-codegen.sh --check

fmt:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(TGO) vet ./...
	for m in $(SIDE_MODULES); do $(TGO) -C $$m vet ./... || exit 1; done
	$(KGO) vet ./...

staticcheck:
	$(TGO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	for m in $(SIDE_MODULES); do $(TGO) -C $$m run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./... || exit 1; done
	$(KGO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

golangci-lint:
	$(TGO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) run ./...
	for m in $(SIDE_MODULES); do $(TGO) -C $$m run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) run --config $(CURDIR)/.golangci.yml ./... || exit 1; done
	$(KGO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) run --config ../.golangci.yml ./...

## bench: the Go benchmarks whose numbers are in docs/benchmarks.md.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
	for m in $(SIDE_MODULES); do $(GO) -C $$m test -run '^$$' -bench . -benchmem ./... || exit 1; done
	$(KGO) test -run '^$$' -bench . -benchmem ./...

build:
	$(GO) build -o bin/gpuscaler ./cmd/gpuscaler
	$(KGO) build -o ../bin/gpuscaler-karpenter ./cmd/gpuscaler-karpenter

run:
	$(GO) run ./cmd/gpuscaler provider --config examples/sim-quickstart.yaml

## release: VERSION=x.y.z. The image for $(PLATFORMS) (make image), then dist/release-$(VERSION): the image as
## an OCI layout archive with its digest, an SPDX SBOM of the binaries, the charts (gpuscaler, gpuscaler-crd)
## packaged with that digest pinned, the version's notes from CHANGELOG.md, and SHA256SUMS.
## .github/workflows/release.yml runs it on a tag vx.y.z and publishes the folder.
release:
	@case "$(VERSION)" in [0-9]*.[0-9]*.[0-9]*) ;; *) echo "usage: make release VERSION=x.y.z"; exit 2;; esac
	$(MAKE) image VERSION=$(VERSION)
	$(GO) -C hack/image run ./release --version $(VERSION) --image $(CURDIR)/dist/image \
	  --binaries $(CURDIR)/dist/linux-amd64/gpuscaler,$(CURDIR)/dist/linux-amd64/gpuscaler-karpenter \
	  --charts $(CURDIR)/deploy/charts/gpuscaler,$(CURDIR)/deploy/charts/gpuscaler-crd \
	  --changelog $(CURDIR)/CHANGELOG.md --out $(CURDIR)/dist/release-$(VERSION)

## image: the container image (gpuscaler and gpuscaler-karpenter, static, uid 65532, CA roots) for
## $(PLATFORMS), as an OCI image layout in dist/image, built without a Docker daemon.
image:
	@set -e; bins=""; for p in $(PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; out=$(CURDIR)/dist/$$os-$$arch; mkdir -p $$out; \
	  echo "building $$p"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $$out/gpuscaler ./cmd/gpuscaler; \
	  (cd $(KARPENTER_DIR) && CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch GOTOOLCHAIN=$(KARPENTER_GOTOOLCHAIN) $(GO) build -trimpath -ldflags "-s -w" -o $$out/gpuscaler-karpenter ./cmd/gpuscaler-karpenter); \
	  bins="$$bins --binary $$p=$$out/gpuscaler,$$out/gpuscaler-karpenter"; \
	done; \
	$(GO) -C hack/image run . --out $(CURDIR)/dist/image --version $(VERSION) --revision "$$(git rev-parse HEAD 2>/dev/null)" $$bins
	@echo "OCI image layout in dist/image (load it with: skopeo copy oci:dist/image docker-daemon:gpuscaler:$(VERSION), or crane push dist/image ...)"
