#!/usr/bin/env bash
# Installs what building, testing and the virtual-lab demo need on Debian 12, as root.
# Idempotent: packages already present are not fetched again.
set -euo pipefail

packages=(
  make gcc git ca-certificates curl wget
  qemu-system-x86 ovmf ipxe          # PCs that netboot: SeaBIOS + iPXE ROMs, OVMF; iPXE binaries to serve
  linux-image-amd64 busybox-static   # kernel and userland of the test image
  cpio squashfs-tools                # image tooling
  xfsprogs                           # mkfs.xfs, which the real dracut puts into the test initramfs (bootd-disk)
  policycoreutils                    # setfiles: the stand-in image's own, which labels its tree (internal/rootfs)
  dnf rpm createrepo-c systemd       # imgbuild: the real dnf and rpm (rpmbuild, rpmsign), repositories for tests, systemctl --root
  bubblewrap                         # imgbuild's build sandbox: scriptlets, layer commands and setfiles run in bwrap
  gnupg                              # test signing keys for the stand-in repositories (e2e TestRealRepos)
  slurm-wlm munge chrony openssh-client openssh-server pdsh  # the real daemons the rendered overlays are tested with
  nfs-kernel-server lmod             # NFS exports/mounts (tested inside a VM: this host's kernel has no NFS) and Lmod
  openmpi-bin libopenmpi-dev         # the users' MPI jobs: mpicc, and libpmix-dev, whose libpmix.so Slurm's mpi/pmix plugin opens
  python3-torch                      # the users' PyTorch jobs (1.13, CPU, gloo): torchrun across nodes
  util-linux                         # nsenter, setpriv, unshare for the per-node namespaces
  uidmap                             # newuidmap/newgidmap: the lab users' subordinate ids at work
  dnsmasq nginx                      # the baselines bootd is measured against (make bench)
  debootstrap                        # make ci-pipeline: a fresh Debian 12 root for the image pipeline
  prometheus prometheus-node-exporter  # monitoring the lab: rendered configs run for real (TestCluster), /metrics scraped (make bench)
  chromium                           # a real browser loads the lab's page (TestLabPage)
  iproute2 tcpdump procps            # namespaces, bridges, taps
  openipmi ipmitool                  # bootd power: ipmi_sim answers real IPMI as a node's BMC; bootd drives BMCs with ipmitool (bmclib)
  sudo curl                          # the master's Slurm power-saving programs (rendered sudoers rule, bootd-power); the test images' hello
  bash zsh                           # the shell completion scripts, run by their tests
  swtpm swtpm-tools tpm2-tools openssl  # a TPM 2.0 for QEMU PCs and tests; the node's side of sealed overlays
  python3-systemd                    # fail2ban (below) reads sshd's failures from the journal through it
)

# The master's firewall (e2e TestCluster/firewall): the real firewalld and fail2ban, run only inside
# that test's namespaces. Their packages enable and start them on this machine, which would change its
# own firewall (and ban addresses from it): the units are masked before the packages arrive (a
# masked unit is started neither by the package nor at boot), and while apt installs them a
# policy-rc.d refuses every start (a machine without systemd runs fail2ban's init script otherwise).
# A machine that already had them keeps its own setup.
firewall_packages=(firewalld fail2ban)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
updated=
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  updated=1
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

fw_missing=()
for p in "${firewall_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || fw_missing+=("$p")
done
if ((${#fw_missing[@]})); then
  echo "setup: installing ${fw_missing[*]} (masked: never started on this machine)"
  export DEBIAN_FRONTEND=noninteractive
  [[ -n "$updated" ]] || apt-get update -qq
  updated=1
  if command -v systemctl >/dev/null; then # without systemd, policy-rc.d below is what stops them
    for p in "${fw_missing[@]}"; do
      systemctl --root=/ mask "$p.service" >/dev/null
    done
  fi
  policy=
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    policy=/usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    printf '#!/bin/sh\n# labcluster setup-debian.sh: no service starts while firewalld and fail2ban install\nexit 101\n' >"$policy"
    chmod 755 "$policy"
  fi
  apt-get install -y -qq --no-install-recommends "${fw_missing[@]}" >/dev/null
  if [[ -n "$policy" ]]; then
    rm -f "$policy"
    trap - EXIT
  fi
fi

# The real dracut (059) for TestRealDracutLiveRoot: only downloaded into a cache, never installed
# (installing dracut would replace initramfs-tools). The test unpacks these .debs into a private
# tree and runs dracut chrooted into an overlay of it on the host's /usr (internal/testkit/vlab/dracut.go).
dracut_debs=/var/cache/labcluster/debs
# NetworkManager and the libraries of it the host lacks: Rocky's initramfs brings the network up
# with NetworkManager (dracut's network-manager module), which TestRealDracutNetworkManager boots.
dracut_packages=(dracut-core dracut-live dracut-network isc-dhcp-client iputils-arping network-manager libndp0 libnm0 libteamdctl0)
mkdir -p "$dracut_debs"
fetch=()
for p in "${dracut_packages[@]}"; do
  compgen -G "$dracut_debs/${p}_*.deb" >/dev/null || fetch+=("$p")
done
if ((${#fetch[@]})); then
  echo "setup: downloading ${fetch[*]} into $dracut_debs (not installed)"
  [[ -n "$updated" ]] || apt-get update -qq
  # apt fetches as _apt when that user can write the directory.
  chown _apt "$dracut_debs" 2>/dev/null || true
  (cd "$dracut_debs" && apt-get download -qq "${fetch[@]}")
fi

# Debian's dnsmasq package starts a system-wide instance; the tests run their own in namespaces.
# Likewise for the cluster daemons: tests start their own, one set per node namespace.
systemctl disable --now dnsmasq munge slurmctld slurmd chrony nfs-server rpcbind rpcbind.socket >/dev/null 2>&1 || true
# nginx is only a benchmark baseline (make bench runs its own instance in a lab namespace). If
# this run installed it and its package started the system-wide service, stop and disable that;
# an nginx the machine already had is left alone.
if [[ " ${missing[*]-} " == *" nginx "* ]]; then
  systemctl disable --now nginx >/dev/null 2>&1 || true
fi
# Likewise Prometheus and node_exporter: the tests run their own, in namespaces.
for p in prometheus prometheus-node-exporter; do
  if [[ " ${missing[*]-} " == *" $p "* ]]; then
    systemctl disable --now "$p" >/dev/null 2>&1 || true
  fi
done

if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then
  echo "setup: Go is at /usr/local/go/bin; add it to PATH"
fi
# Quiet when there was nothing to do: `make demo` and `make check` run this again after the
# README's first command did.
if ((${#missing[@]} + ${#fw_missing[@]} + ${#fetch[@]})); then
  echo "setup: ok"
fi
