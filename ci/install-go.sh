#!/usr/bin/env bash
# Installs the Go toolchain this module builds with into DEST (default /usr/local/go), as root.
#
# Debian 12's golang-go is Go 1.19; go.mod wants 1.26. The toolchain comes from the Go module
# proxy, as golang.org/toolchain, which is where the go command itself fetches toolchains
# (GOTOOLCHAIN): reachable wherever modules are, the same file on every runner, and checked here
# against a pinned sha256, so a run builds with exactly this Go or fails. (actions/setup-go would
# do on GitHub's runners; this script is the same on any CI and on a laptop.)
set -euo pipefail
version=1.26.8
sha256=30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7 # linux-amd64 zip, from proxy.golang.org
dest=${1:-/usr/local/go}
proxy=${GOPROXY_BASE:-https://proxy.golang.org}
mod="golang.org/toolchain@v0.0.1-go$version.linux-amd64"

if [[ -x "$dest/bin/go" ]] && [[ "$("$dest/bin/go" env GOVERSION)" == "go$version" ]]; then
  echo "install-go: $dest has go$version"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
curl -fsSL -o "$tmp/go.zip" "$proxy/golang.org/toolchain/@v/v0.0.1-go$version.linux-amd64.zip"
echo "$sha256  $tmp/go.zip" | sha256sum -c --quiet -
unzip -q "$tmp/go.zip" -d "$tmp/x"
# Module zips keep no file modes: the go command sets them the same way for toolchains it fetches.
chmod 0755 "$tmp/x/$mod/bin/"* "$tmp/x/$mod/pkg/tool/linux_amd64/"*
mkdir -p "$(dirname "$dest")"
rm -rf "$dest.old" && { [[ ! -e "$dest" ]] || mv "$dest" "$dest.old"; }
mv "$tmp/x/$mod" "$dest"
rm -rf "$dest.old"
"$dest/bin/go" version
