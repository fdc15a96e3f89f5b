#!/usr/bin/env bash
# Builds every image from its committed lock, proves the build reproducible (a second build from
# an empty cache must give byte-identical files), and publishes the verified versions with the
# packages they were built from (DIR/rpms/<sha256>.rpm: imgbuild build --package-archive takes
# it, so a version can be rebuilt after the mirrors have dropped its packages).
#
# Disk: a pass keeps one image's layer trees at a time (its cache is removed after it), the
# downloaded packages once (the second pass takes them from the first's, as a package archive:
# the layers are still built from an empty cache), and both passes' versions until they are
# compared. For the CUDA-sized images that is about 55 GB on ext4 and 25 GB on XFS or btrfs
# (ci/pipeline.yml says how that is reckoned).
#
#   ci/build-images.sh [--site site.toml] [--publish DIR] [--version V] [--tree DIR]
#
# --tree names the directory holding images/ and layers/ (default: this repository).
#
# Runs the same on a laptop and in CI (as root: the build chroots, mounts and chowns).
# SOURCE_DATE_EPOCH comes from each lock, so the version's files do not depend on when or
# where it is built. The version defaults to the tag being built (CI_TAG) or today's date.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
export PATH=/usr/local/go/bin:$PATH

site=() publish="" version="${CI_TAG:-$(date -u +%Y.%m.%d)-ci}" tree="$repo"
while (($#)); do
  case "$1" in
    --site) site=(--site "$2"); shift 2 ;;
    --publish) publish="$2"; shift 2 ;;
    --version) version="$2"; shift 2 ;;
    --tree) tree="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$repo" && go build -o "$work/imgbuild" ./cmd/imgbuild)

rpms="$work/rpms"
mkdir -p "$rpms"
for image in "$tree"/images/*.toml; do
  name=$(basename "$image" .toml)
  echo "== $name $version"
  for pass in a b; do
    archive=()
    [[ $pass == b ]] && archive=(--package-archive "$rpms")
    "$work/imgbuild" build "$image" "${site[@]}" "${archive[@]}" --version "$version" \
      --out "$work/out-$pass" --cache "$work/cache-$pass" --log-format json -q
    if [[ $pass == a ]]; then
      find "$work/cache-a/rpms/sha256" -name '*.rpm' -exec mv -t "$rpms" {} +
    fi
    rm -rf "$work/cache-$pass"
  done
  # Reproducibility: every file of the two builds, manifest included, must be identical.
  if ! diff -r "$work/out-a/$name/$version" "$work/out-b/$name/$version" >/dev/null; then
    echo "!! $name: two builds of the same lock differ:" >&2
    (cd "$work" && sha256sum out-a/"$name"/"$version"/* out-b/"$name"/"$version"/*) >&2
    exit 1
  fi
  echo "   reproducible: $(cd "$work/out-a/$name/$version" && sha256sum rootfs.squashfs | cut -c1-16)"
  "$work/imgbuild" list "$name" --out "$work/out-a" | grep -v BROKEN >/dev/null
done

if [[ -n "$publish" ]]; then
  mkdir -p "$publish/rpms"
  # The package archive: content-addressed, shared by every version published here.
  for f in "$rpms"/*.rpm; do
    b=$(basename "$f")
    [[ -e "$publish/rpms/$b" ]] || { cp "$f" "$publish/rpms/.$b.tmp" && mv -T "$publish/rpms/.$b.tmp" "$publish/rpms/$b"; }
  done
  echo "published $(ls "$rpms" | wc -l) packages in $publish/rpms"
  # The root images' chunks, shared by every version published here: the new ones first, so that
  # no published index names a chunk that is not there yet (chunks already present are kept; a
  # new chunk is named only by the versions published below).
  if [[ -d "$work/out-a/.castr" ]]; then
    mkdir -p "$publish/.castr"
    cp -an "$work/out-a/.castr/." "$publish/.castr/"
    echo "published the chunks in $publish/.castr"
  fi
  for dir in "$work"/out-a/*/"$version"; do
    name=$(basename "$(dirname "$dir")")
    mkdir -p "$publish/$name"
    # Copy under a hidden name, then rename: readers of $publish never see half a version.
    cp -a "$dir" "$publish/$name/.$version.tmp"
    mv -T "$publish/$name/.$version.tmp" "$publish/$name/$version"
    echo "published $publish/$name/$version"
  done
fi
