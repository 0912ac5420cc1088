#!/usr/bin/env bash
# Runs one fuzz harness on its seed corpus and dictionary.
#   tests/fuzz/run.sh HARNESS BUILD_DIR [LIBFUZZER_OPTION...]
# HARNESS: yaml, schedule, safetensors, tokenizer or hfconfig; BUILD_DIR holds fuzz_HARNESS (the fuzz preset).
# New inputs go to a working corpus (FUZZ_CORPUS, default a temporary folder removed at the
# end), never into the repository; a finding is saved as FUZZ_ARTIFACTS/crash-* (default: the
# current folder). Prints libFuzzer's summary; the exit status is libFuzzer's (0: no finding).
set -euo pipefail
harness=$1 build=$2
shift 2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
binary=$build/tests/fuzz/fuzz_$harness
[[ -x $binary ]] || { echo "run.sh: $binary is missing (cmake --preset fuzz && cmake --build --preset fuzz)" >&2; exit 2; }
seeds=$here/corpus/$harness
work=${FUZZ_CORPUS:-}
if [[ -z $work ]]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/mk-fuzz-$harness.XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"
extra=()
# The model harness also starts from the tiny example models.
[[ $harness == yaml ]] && extra+=("$root/examples/tiny-llama.yaml" "$root/examples/tiny-qwen3.yaml")
for f in "${extra[@]}"; do cp "$f" "$work/"; done
artifacts=${FUZZ_ARTIFACTS:-./}
# detect_leaks=0 would hide leaks; keep them on. -timeout: an input taking over 20 s is a finding.
# Not exec: the trap above removes the temporary corpus afterwards.
"$binary" -dict="$here/$harness.dict" -artifact_prefix="$artifacts" -timeout=20 -rss_limit_mb=4096 \
  -print_final_stats=1 "$@" "$work" "$seeds"
