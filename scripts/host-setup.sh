# Sourced by .ci/run and scripts/lab-deploy.sh: the Debian packages stackctl drives
# and its tests talk to, and a running Docker Engine. Idempotent; needs root.
#
# Real peers: OpenIPMI's ipmi_sim (a BMC), ipmitool (a client), openssl (test
# certificates for Redfish over TLS), curl (a generic Redfish client), QEMU (the lab's
# simulated machines, behind virtual BMCs; qemu-utils for qemu-img, their disks), OpenSSH (a real sshd for the remote-execution
# tests), Docker Engine, busybox-static (a tiny test image) and debootstrap (the Debian
# root filesystem of the container images), dnsmasq, iproute2 and iptables (DHCP/TFTP
# between network namespaces; busybox-static gives their DHCP and TFTP clients), and
# fdisk, e2fsprogs and grub-pc-bin (the host OS disk image: partition table, ext4 written
# from a folder, BIOS boot loader), python3 (runs the lab's fake Nova virt driver in a
# unit test) with python3-keystoneauth1 (runs the registration program in a unit test), and
# the parsers the rendered config files are read back with in unit tests: python3-oslo.config
# and python3-sqlalchemy (the services' INI values and database URLs), mariadb-client-core
# (my_print_defaults: MariaDB's option files), and chromium (headless: the run report's page is
# loaded and looked at in a unit test).
STACKCTL_PACKAGES=(openipmi ipmitool openssl curl qemu-system-x86 qemu-utils openssh-server openssh-client docker.io busybox-static debootstrap tar dnsmasq-base iproute2 iptables fdisk e2fsprogs grub-pc-bin python3 python3-keystoneauth1 python3-oslo.config python3-sqlalchemy mariadb-client-core chromium systemd)

# host_setup [EXTRA_PACKAGE...]: install what is missing, then start dockerd if none answers.
host_setup() {
  export DEBIAN_FRONTEND=noninteractive
  local missing=() p
  for p in "${STACKCTL_PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  if ! docker info >/dev/null 2>&1; then
    echo "setup: starting dockerd"
    # Every descriptor above stderr is closed first: one inherited from `flock LOCK .ci/run` (the
    # machine lock) would be held by dockerd for its whole life, and every later `flock LOCK` waits.
    ( (
      for fd in /proc/self/fd/*; do
        n=${fd##*/}
        if [ "$n" -gt 2 ]; then eval "exec $n>&-"; fi
      done
      exec dockerd
    ) >/var/log/stackctl-dockerd.log 2>&1 &)
    for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
    docker info >/dev/null 2>&1 || {
      echo "setup: dockerd did not start; see /var/log/stackctl-dockerd.log" >&2
      return 1
    }
  fi
  echo "setup: node $(node --version), npm $(npm --version)"
  # `npm install` rather than `npm ci`: the package mirror serves only some platforms'
  # optional binaries (rollup's, for one), so the lock file cannot list them all and
  # `npm ci` refuses it as out of sync. `npm install` still installs the locked versions.
  npm install --no-audit --no-fund
}
