#!/usr/bin/env bash
# Regenerates the API types' deepcopy code and the CRD YAML with
# controller-gen at a pinned version. The outputs are committed; neither
# builds nor CI need this. Run it after changing api/.
set -euo pipefail
cd "$(dirname "$0")/.."
CONTROLLER_TOOLS_VERSION=v0.23.0
go run "sigs.k8s.io/controller-tools/cmd/controller-gen@${CONTROLLER_TOOLS_VERSION}" \
  object paths=./api/... \
  crd:crdVersions=v1 output:crd:dir=deploy/crds paths=./api/...
echo "regenerated api/v1alpha1/zz_generated.deepcopy.go and deploy/crds/"
