#!/usr/bin/env bash
# Regenerates the API types' deepcopy code and the CRD YAML with
# controller-gen at a pinned version, and copies each CRD to where it is
# read: deploy/crds (kubectl apply, the tests), the chart's crds/, the
# gpuscaler-crd chart's templates (helm upgrade), and the Karpenter
# operator's apis/crds (embedded). The outputs are committed; run
# it after changing api/ or karpenter/apis/.
#
#   hack/update-codegen.sh          regenerate
#   hack/update-codegen.sh --check  fail if what is committed differs from
#                                   what would be generated (make lint)
set -euo pipefail
cd "$(dirname "$0")/.."
CONTROLLER_TOOLS_VERSION=v0.23.0
KARPENTER_GOTOOLCHAIN="${KARPENTER_GOTOOLCHAIN:-go1.27.3}"
check=false
[[ "${1:-}" == "--check" ]] && check=true

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Both modules on the Karpenter module's toolchain: controller-gen is
# built once.
export GOTOOLCHAIN="$KARPENTER_GOTOOLCHAIN"
gen() { go run "sigs.k8s.io/controller-tools/cmd/controller-gen@${CONTROLLER_TOOLS_VERSION}" "$@"; }
if $check; then
  gen crd:crdVersions=v1 output:crd:dir="$out/main" paths=./api/...
  (cd karpenter && gen crd:crdVersions=v1 output:crd:dir="$out/karpenter" paths=./apis/...)
  status=0
  for f in "$out"/main/*.yaml "$out"/karpenter/*.yaml; do
    base=$(basename "$f")
    copies=(deploy/crds/"$base" deploy/charts/gpuscaler/crds/"$base" deploy/charts/gpuscaler-crd/templates/"$base")
    [[ "$f" == "$out"/karpenter/* ]] && copies+=(karpenter/apis/crds/"$base")
    for c in "${copies[@]}"; do
      if ! cmp -s "$f" "$c"; then
        echo "$c differs from what controller-gen makes of the API types" >&2
        status=1
      fi
    done
  done
  if [[ $status != 0 ]]; then
    echo "run hack/update-codegen.sh and commit the result" >&2
  fi
  exit $status
fi

gen object paths=./api/... crd:crdVersions=v1 output:crd:dir=deploy/crds paths=./api/...
(cd karpenter && gen object paths=./apis/... crd:crdVersions=v1 output:crd:dir=apis/crds paths=./apis/...)
cp karpenter/apis/crds/gpuscaler.dev_gpunodeclasses.yaml deploy/crds/
cp deploy/crds/*.yaml deploy/charts/gpuscaler/crds/
cp deploy/crds/*.yaml deploy/charts/gpuscaler-crd/templates/
echo "regenerated deepcopy code and CRDs (deploy/crds, the chart's crds/, the gpuscaler-crd chart's templates, karpenter/apis/crds)"
