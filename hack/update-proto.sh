#!/usr/bin/env bash
# Regenerates proto/*.pb.go from proto/externalgrpc.proto.
#
# The generated files are committed, so neither builds nor CI need this; run
# it after changing the proto. Needs protoc (Debian: apt-get install
# protobuf-compiler); installs the Go plugins at pinned versions into a cache
# folder outside the work tree.
set -euo pipefail
cd "$(dirname "$0")/.."

PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.5.1
BIN="${XDG_CACHE_HOME:-$HOME/.cache}/gpuscaler/protoc-plugins/${PROTOC_GEN_GO_VERSION}-${PROTOC_GEN_GO_GRPC_VERSION}"

if ! command -v protoc >/dev/null; then
  echo "protoc not found: install it (Debian/Ubuntu: apt-get install protobuf-compiler)" >&2
  exit 1
fi
if [[ ! -x "$BIN/protoc-gen-go" || ! -x "$BIN/protoc-gen-go-grpc" ]]; then
  mkdir -p "$BIN"
  (cd /tmp && GOBIN="$BIN" go install "google.golang.org/protobuf/cmd/protoc-gen-go@${PROTOC_GEN_GO_VERSION}")
  (cd /tmp && GOBIN="$BIN" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@${PROTOC_GEN_GO_GRPC_VERSION}")
fi

PATH="$BIN:$PATH" protoc -I proto \
  --go_out=proto --go_opt=paths=source_relative \
  --go-grpc_out=proto --go-grpc_opt=paths=source_relative \
  proto/externalgrpc.proto
echo "regenerated proto/externalgrpc.pb.go and proto/externalgrpc_grpc.pb.go"
