#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ with clang (ASan + UBSan +
# libFuzzer) in build/fuzz and runs each for a bounded time on a copy of its
# seed corpus (the spec reader's: tests/fuzz/corpus/spec_reader and every spec
# in specs/). Exits non-zero when a fuzzer finds a crash, a leak, a timeout
# or an out-of-memory input (its reproducer is left under build/fuzz/artifacts/,
# with the fuzzer's whole output; the report is repeated at the end).
#
#   tests/fuzz/run_fuzzers.sh                    # both fuzzers, 30 s each
#   tests/fuzz/run_fuzzers.sh opaque_fuzzer      # one of them
#   OPGEN_FUZZ_SECONDS=600 tests/fuzz/run_fuzzers.sh
#
# Environment:
#   OPGEN_FUZZ_SECONDS        seconds per fuzzer (default 30)
#   OPGEN_FUZZ_BUILD_DIR      build directory (default build/fuzz)
#   OPGEN_FUZZ_CXX            the clang++ to use (default: clang++, else clang++-14)
#   OPGEN_FUZZ_SOURCE_DIR     fuzz another tree's generator/runtime/generated
#                             (an export of a commit, say; default this checkout)
#   OPGEN_FUZZ_FRESH_CORPUS=1 start from the seeds alone (default: the working
#                             corpus in the build directory grows from run to run;
#                             the seeds in tests/fuzz/corpus/ are never written)
#   OPGEN_FUZZ_KEEP_GOING=1   fork mode: go on after a crash and collect every
#                             reproducer (-fork=1 -ignore_crashes=1 ...)
#   OPGEN_FUZZ_ARGS           extra libFuzzer flags
#
# Debian packages: clang-14 libclang-rt-14-dev (libFuzzer), libyaml-cpp-dev, cmake, ninja-build.
# Replay a reproducer: build/fuzz/spec_reader_fuzzer FILE
# (OPGEN_FUZZ_VERBOSE=1 prints the spec reader's diagnostics for each input).
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"

seconds="${OPGEN_FUZZ_SECONDS:-30}"
build="${OPGEN_FUZZ_BUILD_DIR:-build/fuzz}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac

cxx="${OPGEN_FUZZ_CXX:-}"
if [ -z "$cxx" ]; then
  for c in clang++ clang++-14; do
    if command -v "$c" >/dev/null 2>&1; then cxx="$(command -v "$c")"; break; fi
  done
fi
if [ -z "$cxx" ]; then
  echo "run_fuzzers: no clang++ (Debian: apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 2
fi
probe="$(mktemp -d)"
trap 'rm -rf "$probe"' EXIT
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' \
  >"$probe/probe.cc"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe/probe.cc" -o "$probe/probe" 2>"$probe/log"; then
  cat "$probe/log" >&2
  echo "run_fuzzers: $cxx cannot link -fsanitize=fuzzer (Debian: apt-get install libclang-rt-14-dev)" >&2
  exit 2
fi

generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
configure=(-S "$root/tests/fuzz" -B "$build" -DCMAKE_CXX_COMPILER="$cxx"
           -DCMAKE_BUILD_TYPE=RelWithDebInfo)
[ -n "${OPGEN_FUZZ_SOURCE_DIR:-}" ] && configure+=(-DOPGEN_FUZZ_SOURCE_DIR="$OPGEN_FUZZ_SOURCE_DIR")
if [ -f "$build/CMakeCache.txt" ]; then
  cmake "${configure[@]}" >/dev/null
else
  cmake "${generator[@]}" "${configure[@]}" >/dev/null
fi

fuzzers=("$@")
[ ${#fuzzers[@]} -gt 0 ] || fuzzers=(spec_reader_fuzzer opaque_fuzzer)
cmake --build "$build" --target "${fuzzers[@]}"

stamp="$(date +%Y%m%d-%H%M%S)"
status=0
summary=()  # what failed, repeated at the end: a CI log's tail must show it
for fuzzer in "${fuzzers[@]}"; do
  name="${fuzzer%_fuzzer}"
  seeds="$root/tests/fuzz/corpus/$name"
  corpus="$build/corpus/$name"
  artifacts="$build/artifacts/$name-$stamp"
  [ "${OPGEN_FUZZ_FRESH_CORPUS:-0}" = 1 ] && rm -rf "$corpus"
  mkdir -p "$corpus" "$artifacts"
  cp -f "$seeds"/* "$corpus"/
  # Every real spec is a seed too, so that the corpus speaks the whole spec
  # language as it grows (as specs-<file>: some seeds share a spec's file name).
  if [ "$name" = spec_reader ]; then
    for spec in "$root"/specs/*.yaml; do cp -f "$spec" "$corpus/specs-$(basename "$spec")"; done
  fi

  flags=(-max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 -print_final_stats=1
         -artifact_prefix="$artifacts/")
  case "$name" in
    spec_reader) flags+=(-dict="$root/tests/fuzz/yaml.dict" -max_len=16384) ;;
    opaque) flags+=(-max_len=256 -use_value_profile=1) ;;
  esac
  if [ "${OPGEN_FUZZ_KEEP_GOING:-0}" = 1 ]; then
    flags+=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  fi
  # shellcheck disable=SC2206
  flags+=(${OPGEN_FUZZ_ARGS:-})

  echo "run_fuzzers: $fuzzer for ${seconds}s on $corpus ($(ls "$corpus" | wc -l) inputs)"
  # Its whole output goes to $name.log; the screen gets all but the lines of
  # each input the corpus gains (NEW, REDUCE), thousands in a run.
  (cd "$artifacts" && { "$build/$fuzzer" "${flags[@]}" "$corpus" 2>&1 && echo 0 >.rc || echo $? >.rc; }) |
    tee "$artifacts/$name.log" | { grep -av --line-buffered -E '^#[0-9]+[[:space:]]+(NEW|REDUCE)' || true; }
  rc=$(cat "$artifacts/.rc")
  rm -f "$artifacts/.rc"
  found=$(find "$artifacts" -maxdepth 1 -type f \
            \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) \
            2>/dev/null | sort || true)
  if [ "$rc" -ne 0 ] || [ -n "$found" ]; then
    status=1
    summary+=("run_fuzzers: $fuzzer FAILED (exit $rc); its report, from $artifacts/$name.log:")
    while IFS= read -r line; do summary+=("  | $line"); done \
      < <(grep -a -A25 -m1 -E '^==[0-9]+==|^INFO: (libFuzzer|Timeout)|SUMMARY|runtime error|^ALARM' \
            "$artifacts/$name.log" | head -40)
    for f in $found; do
      summary+=("  reproducer $f" "    base64: $(base64 -w0 "$f")")
    done
  else
    echo "run_fuzzers: $fuzzer ok"
    rm -f "$artifacts/$name.log"
    rmdir "$artifacts" 2>/dev/null || true
  fi
done
for line in ${summary[@]+"${summary[@]}"}; do echo "$line" >&2; done
exit $status
