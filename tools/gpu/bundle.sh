#!/usr/bin/env bash
# Packs everything that needs a GPU into one folder that runs on a machine
# with a GPU and nothing else: no Bazel, no -dev packages, no network.
#
#   bash tools/gpu/bundle.sh        # -> gpu_bundle/ and gpu_bundle.tar.gz
#   bash tools/gpu/bundle.sh /tmp/b # elsewhere (/tmp/b, /tmp/b.tar.gz)
#   # on the GPU machine, from the tarball's folder:
#   tar -xzf gpu_bundle.tar.gz && OUT=/some/dir bash gpu_bundle/run.sh
#
# It builds every test tagged `gpu`, the GPU benchmarks and the train
# binary (with train_checks.sh and its PyTorch baseline) with
# --config=cuda --config=opt, our own libraries linked in statically and
# an RPATH of $ORIGIN/../lib, strips them, and copies into lib/ each shared
# library they load except
# the C library's own, the CUDA driver (libcuda, which comes with the
# driver) and NCCL and cuBLAS (hundreds of MB; run.sh finds them on the
# machine, in NVIDIA's Python wheels or the CUDA toolkit). The folder goes
# into a gzipped tarball beside it, which is what travels: it must stay
# under 64 MiB (the most that travels to the GPU machine), and the script
# fails if it does not. (oneDNN alone, which the CPU references link, is
# 40 MB unpacked.)
set -euo pipefail
cd "$(dirname "$0")/../.."

bundle="${1:-gpu_bundle}"
max_bytes=$((64 * 1024 * 1024))
# The RPATH (DT_RPATH, not RUNPATH: it also serves the libraries' own
# dependencies, and comes before LD_LIBRARY_PATH) lets each binary find the
# bundle's libraries without a library path that would leak into python3
# or nvidia-smi on the GPU machine.
flags=(--config=cuda --config=opt --dynamic_mode=off
  '--linkopt=-Wl,-rpath,$ORIGIN/../lib' --linkopt=-Wl,--disable-new-dtags)

mapfile -t tests < <(bazel query --noshow_progress \
  'attr(tags, "\bgpu\b", tests(//...))' 2>/dev/null)
benchmarks=(//tools/bench:cuda_bench //tools/bench:chunk_cuda_bench
  //tools/bench:offload_bench)
programs=(//tools/train:train)
if [[ ${#tests[@]} -eq 0 ]]; then
  echo "bundle.sh: no test is tagged gpu" >&2
  exit 1
fi
bazel build "${flags[@]}" "${tests[@]}" "${benchmarks[@]}" "${programs[@]}"
bin_dir="$(bazel info "${flags[@]}" bazel-bin 2>/dev/null)"

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib"
: >"$bundle/tests.txt"
: >"$bundle/benchmarks.txt"
for label in "${tests[@]}" "${benchmarks[@]}" "${programs[@]}"; do
  path="${label#//}"
  path="${path/://}"
  name="$(echo "${label#//}" | tr '/:' '__')"
  cp "$bin_dir/$path" "$bundle/bin/$name"
  chmod u+w "$bundle/bin/$name"
  strip "$bundle/bin/$name"
  if ! readelf -d "$bundle/bin/$name" | grep -q 'RPATH.*\$ORIGIN/\.\./lib'; then
    echo "bundle.sh: $name has no RPATH \$ORIGIN/../lib" >&2
    exit 1
  fi
  case " ${tests[*]} " in
    *" $label "*) echo "$name" >>"$bundle/tests.txt" ;;
    *)
      case " ${benchmarks[*]} " in
        *" $label "*) echo "$name" >>"$bundle/benchmarks.txt" ;;
      esac
      ;;
  esac
done

# Shared libraries: what ldd resolves here, minus what the GPU machine has.
# A library ldd cannot find here would be missing there too.
missing="$(ldd "$bundle"/bin/* | grep 'not found' | sort -u || true)"
if [[ -n "$missing" ]]; then
  echo "bundle.sh: unresolved libraries:" >&2
  echo "$missing" >&2
  exit 1
fi
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libcuda\.so|libnccl|libcublas)'
for binary in "$bundle"/bin/*; do
  ldd "$binary" | awk '/=> \// {print $1, $3}'
done | sort -u | while read -r soname path; do
  if [[ "$soname" =~ $skip ]]; then continue; fi
  cp -L "$path" "$bundle/lib/$soname"
  chmod u+w "$bundle/lib/$soname"
  strip --strip-unneeded "$bundle/lib/$soname" 2>/dev/null || true
done

cp tools/gpu/run.sh tools/gpu/train_checks.sh tools/gpu/torch_gpt2_bench.py \
  tools/gpu/summarize.py tools/gpu/train_summary.py "$bundle/"
git rev-parse --short HEAD >"$bundle/commit.txt" 2>/dev/null || true
tarball="$bundle.tar.gz"
tar -C "$(dirname "$bundle")" -czf "$tarball" "$(basename "$bundle")"
size=$(du -sb "$bundle" | cut -f1)
packed=$(stat -c %s "$tarball")
echo "bundle.sh: $bundle holds $(ls "$bundle/bin" | wc -l) binaries and" \
  "$(ls "$bundle/lib" | wc -l) libraries, $((size / 1024)) KiB;" \
  "$tarball $((packed / 1024)) KiB"
if ((packed > max_bytes)); then
  echo "bundle.sh: $tarball is over 64 MiB; it would not travel" >&2
  exit 1
fi
