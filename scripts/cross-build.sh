#!/usr/bin/env bash
# Vets the whole module without cgo for each release target (go vet compiles the tests
# too), printing one line per target. Exits non-zero naming the targets that failed.
# Extra arguments go to go vet (e.g. -p=2); TARGETS overrides the target list.
set -uo pipefail
cd "$(dirname "$0")/.."

targets=${TARGETS:-"linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64"}
failed=()
for t in $targets; do
	goos=${t%/*} goarch=${t#*/}
	if out=$(CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go vet "$@" ./... 2>&1); then
		echo "ok   $t"
	else
		echo "FAIL $t"
		printf '%s\n' "$out" | sed 's/^/    /'
		failed+=("$t")
	fi
done
if ((${#failed[@]})); then
	echo "cross-build: go vet failed for ${failed[*]}" >&2
	exit 1
fi
