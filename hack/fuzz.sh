#!/usr/bin/env bash
# fuzz.sh runs every Go fuzz target of the main module for FUZZTIME each
# (default 60s), one at a time: `make fuzz`. `make test` already runs each
# target's seed corpus (its f.Add seeds and testdata/fuzz/). A failure
# leaves its input in the package's testdata/fuzz/<Target>/: commit it, so
# it runs in every `make test` from then on.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-60s}"
go="${GO:-go}"
status=0
while IFS=: read -r file _ decl; do
	target="${decl#func }"
	target="${target%%(*}"
	pkg="./$(dirname "$file")"
	echo "== $pkg $target ($fuzztime)"
	if ! "$go" test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"; then
		status=1
	fi
done < <(git ls-files '*_test.go' | xargs grep -n '^func Fuzz' | sort)
exit "$status"
