#!/usr/bin/env bash
# Installs, on Debian 12 as root, what ci/build-images.sh needs besides Go (ci/install-go.sh):
# the real dnf and rpm, squashfs-tools, cpio, systemctl (services are enabled with
# systemctl --root), git (a lock's default epoch), and curl and unzip for ci/install-go.sh.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  dnf rpm squashfs-tools cpio systemd git ca-certificates curl unzip >/dev/null
echo "install-tools: ok"
