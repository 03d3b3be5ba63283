#!/usr/bin/env bash
# Regenerates the API types' deepcopy code and the CRD YAML with
# controller-gen at a pinned version. The outputs are committed; neither
# builds nor CI need this. Run it after changing api/ or
# cmd/gpuscaler-karpenter/apis/.
set -euo pipefail
cd "$(dirname "$0")/.."
CONTROLLER_TOOLS_VERSION=v0.23.0
go run "sigs.k8s.io/controller-tools/cmd/controller-gen@${CONTROLLER_TOOLS_VERSION}" \
  object paths=./api/... \
  crd:crdVersions=v1 output:crd:dir=deploy/crds paths=./api/...
# The Karpenter operator is its own module (see docs/karpenter.md) on a
# newer Go; its CRD is embedded from apis/crds and copied to deploy/crds.
(
  cd cmd/gpuscaler-karpenter
  export GOTOOLCHAIN="${KARPENTER_GOTOOLCHAIN:-go1.27.3}"
  go run "sigs.k8s.io/controller-tools/cmd/controller-gen@${CONTROLLER_TOOLS_VERSION}" \
    object paths=./apis/... \
    crd:crdVersions=v1 output:crd:dir=apis/crds paths=./apis/...
)
cp cmd/gpuscaler-karpenter/apis/crds/gpuscaler.dev_gpunodeclasses.yaml deploy/crds/
echo "regenerated deepcopy code and CRDs (deploy/crds, cmd/gpuscaler-karpenter/apis/crds)"
