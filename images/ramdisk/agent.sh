#!/bin/sh
# The stackctl ramdisk agent (busybox ash, POSIX shell).
#
# Parameters come from the kernel command line, written there by the node's
# iPXE script:
#   stackctl.api=URL       the deploy host's boot server (agent API)
#   stackctl.node=NAME     this node's name in the inventory
#   stackctl.token=TOKEN   one-time token: sent as "Authorization: Bearer", never printed
#   stackctl.purpose=P     inspect | clean | deploy
#   BOOTIF=01-aa-bb-...    the NIC the machine booted from (PXELINUX convention)
#
# What it does: brings the boot NIC up by DHCP; for `inspect`, collects the
# hardware facts (CPUs, memory, disks, NICs), POSTs them to
# /v1/agent/<node>/introspection and returns (/init then powers off); for
# `clean` and `deploy`, enters the command loop.
#
# SECRET: the token is held in one variable and used in one place
# (agent_wget). Nothing here echoes /proc/cmdline, and `set -x` must never
# be used: it would print the token on the serial console.

set -u

# stderr, which /init points at the console: the JSON builders below print their
# results on stdout and log as they go
log() { echo "stackctl-agent: $*" >&2; }

# The value of a key=value word of the kernel command line (first match).
cmdline_arg() {
  for word in $(cat /proc/cmdline); do
    case "$word" in
      "$1="*)
        echo "${word#*=}"
        return 0
        ;;
    esac
  done
  return 1
}

API=$(cmdline_arg stackctl.api) || API=
NODE=$(cmdline_arg stackctl.node) || NODE=
TOKEN=$(cmdline_arg stackctl.token) || TOKEN=
PURPOSE=$(cmdline_arg stackctl.purpose) || PURPOSE=inspect
BOOTIF=$(cmdline_arg BOOTIF) || BOOTIF=
WORK=/run/stackctl
mkdir -p "$WORK"

if [ -z "$API" ] || [ -z "$NODE" ] || [ -z "$TOKEN" ]; then
  log "missing stackctl.api, stackctl.node or stackctl.token on the kernel command line: nothing to do"
  exit 1
fi
log "node $NODE, purpose $PURPOSE, API $API (token present, not shown)"

# ---------------------------------------------------------------------------
# helpers

# One sysfs attribute, blanks trimmed; empty when absent.
attr() {
  [ -r "$1" ] || return 0
  sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' "$1" 2>/dev/null | head -n 1
}

# A JSON string literal: quotes and backslashes escaped, control characters dropped.
json_str() {
  printf '"%s"' "$(printf '%s' "$1" | tr -d '\000-\037' | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g')"
}

# Append ,"key":"value" to a JSON object under construction, only when value is set.
opt_str() {
  [ -n "$2" ] && printf ',"%s":%s' "$1" "$(json_str "$2")"
  return 0
}

# ---------------------------------------------------------------------------
# network

# The interface whose MAC BOOTIF names (01-aa-bb-cc-dd-ee-ff), or empty.
boot_interface() {
  [ -n "$BOOTIF" ] || return 0
  want=$(echo "${BOOTIF#01-}" | tr 'A-F-' 'a-f:')
  for dev in /sys/class/net/*; do
    [ "$(attr "$dev/address")" = "$want" ] && echo "${dev##*/}" && return 0
  done
  return 0
}

# Physical NICs (those with a device behind them): no lo, no virtual links.
physical_nics() {
  for dev in /sys/class/net/*; do
    [ -e "$dev/device" ] && echo "${dev##*/}"
  done
  return 0
}

network_up() {
  ip link set lo up
  nics=$(boot_interface)
  [ -n "$nics" ] || nics=$(physical_nics)
  for nic in $nics; do
    ip link set "$nic" up
    # udhcpc keeps running in the background after the lease (it renews it): a
    # deploy may take longer than the lease
    if udhcpc -i "$nic" -n -t 10 -T 2 -A 2 -s /usr/share/udhcpc/default.script >/dev/null 2>&1; then
      log "DHCP on $nic: $(cat "$WORK/ipv4.$nic" 2>/dev/null)"
      return 0
    fi
    log "no DHCP answer on $nic"
  done
  return 1
}

# ---------------------------------------------------------------------------
# introspection

cpu_json() {
  count=$(grep -c '^processor' /proc/cpuinfo)
  model=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -n 1)
  log "CPUs: $count x ${model:-unknown model}"
  printf '{"count":%s,"arch":%s%s}' "${count:-1}" "$(json_str "$(uname -m)")" "$(opt_str model "$model")"
}

# Installed memory in MiB: online memory blocks times their size, which is
# what the machine has (MemTotal is smaller: the kernel's own reservations
# are not in it); MemTotal when the kernel has no memory block sysfs.
memory_mib() {
  bs_hex=$(attr /sys/devices/system/memory/block_size_bytes)
  if [ -n "$bs_hex" ]; then
    blocks=0
    for b in /sys/devices/system/memory/memory*; do
      [ "$(attr "$b/online")" = 1 ] && blocks=$((blocks + 1))
    done
    if [ "$blocks" -gt 0 ]; then
      echo $((blocks * 0x$bs_hex / 1048576))
      return 0
    fi
  fi
  awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo
}

disks_json() {
  sep=
  printf '['
  for d in /sys/block/*; do
    name=${d##*/}
    case "$name" in loop* | ram* | zram* | sr* | fd* | dm-* | md* | nbd*) continue ;; esac
    sectors=$(attr "$d/size")
    # /sys/block/*/size counts 512-byte sectors whatever the logical block size
    size=$((${sectors:-0} * 512))
    serial=$(attr "$d/serial")
    [ -n "$serial" ] || serial=$(attr "$d/device/serial")
    wwn=$(attr "$d/wwid")
    [ -n "$wwn" ] || wwn=$(attr "$d/device/wwid")
    rot=$(attr "$d/queue/rotational")
    hctl=
    [ -d "$d/device/scsi_device" ] && hctl=$(ls "$d/device/scsi_device" 2>/dev/null | head -n 1)
    printf '%s{"name":"/dev/%s","size_bytes":%s' "$sep" "$name" "$size"
    opt_str serial "$serial"
    opt_str wwn "$wwn"
    opt_str model "$(attr "$d/device/model")"
    vendor=$(attr "$d/device/vendor")
    # virtio and other PCI-attached disks show the bus's vendor id (0x1af4) here, not a maker
    case "$vendor" in 0x*) vendor= ;; esac
    opt_str vendor "$vendor"
    opt_str hctl "$hctl"
    case "$rot" in 1) printf ',"rotational":true' ;; 0) printf ',"rotational":false' ;; esac
    printf '}'
    sep=,
    log "disk /dev/$name: $size bytes${serial:+, serial $serial}"
  done
  printf ']'
}

nics_json() {
  sep=
  printf '['
  for nic in $(physical_nics); do
    mac=$(attr "/sys/class/net/$nic/address")
    link=$(attr "/sys/class/net/$nic/operstate")
    log "NIC $nic: $mac, link $link"
    printf '%s{"name":%s,"mac":%s' "$sep" "$(json_str "$nic")" "$(json_str "$mac")"
    opt_str ipv4 "$(cat "$WORK/ipv4.$nic" 2>/dev/null)"
    opt_str link "$link"
    printf '}'
    sep=,
  done
  printf ']'
}

system_json() {
  fields="$(opt_str vendor "$(attr /sys/class/dmi/id/sys_vendor)")$(opt_str product "$(attr /sys/class/dmi/id/product_name)")"
  fields="$fields$(opt_str serial "$(attr /sys/class/dmi/id/product_serial)")"
  printf '{%s}' "${fields#,}"
}

introspection_json() {
  boot_mode=bios
  [ -d /sys/firmware/efi ] && boot_mode=uefi
  printf '{"cpu":%s,"memory_mib":%s,"disks":%s,"interfaces":%s,"boot_mode":"%s","system":%s}\n' \
    "$(cpu_json)" "$(memory_mib)" "$(disks_json)" "$(nics_json)" "$boot_mode" "$(system_json)"
}

# ---------------------------------------------------------------------------
# the API

# wget against the agent API with the token; the answer body goes to
# $WORK/answer. Prints wget's error line (never the request) on failure.
# NOTE: the server answers 202 Accepted; bookworm's busybox wget (1.35) takes
# any 2xx as success, older builds fail on all but 200/204/206: a 202 in the
# error line still means accepted.
agent_wget() {
  out=$(wget -q -O "$WORK/answer" --header "Authorization: Bearer $TOKEN" "$@" 2>&1)
  rc=$?
  [ $rc -eq 0 ] && return 0
  case "$out" in *" 202 "*) return 0 ;; esac
  echo "$out" | head -n 1
  return 1
}

# POST a JSON file to /v1/agent/<node>/<endpoint>. Retries what may pass on a
# retry (no connection, 5xx); gives up at once on a refusal (4xx).
post_json() {
  attempt=0
  while :; do
    attempt=$((attempt + 1))
    if why=$(agent_wget --header "Content-Type: application/json" --post-file "$2" "$API/v1/agent/$NODE/$1"); then
      log "$1 accepted"
      return 0
    fi
    case "$why" in
      *" 4"[0-9][0-9]" "*)
        log "$1 refused: $why"
        return 2
        ;;
    esac
    if [ $attempt -ge 10 ]; then
      log "$1 failed $attempt times, giving up: $why"
      return 1
    fi
    log "$1 failed (${why:-no answer}), retrying"
    sleep $((attempt < 5 ? attempt : 5))
  done
}

# ---------------------------------------------------------------------------
# the command loop (clean and deploy)
#
# The deploy host answers GET /v1/agent/<node>/command with one line:
#   wait                          nothing yet: ask again in a few seconds
#   write-image URL SHA256 DEV    stream the image onto DEV, check it, POST /result
#   poweroff | reboot             end
# The image writer is the next step; until the server has the endpoint the
# loop ends after stackctl.wait seconds (default 600) and powers off.
# NOTE: today a token is spent by the first accepted call; for this loop the
# server must let a clean/deploy token poll /command and spend it on /result.
command_loop() {
  wait_s=$(cmdline_arg stackctl.wait) || wait_s=600
  deadline=$(($(cut -d. -f1 /proc/uptime) + wait_s))
  while [ "$(cut -d. -f1 /proc/uptime)" -lt "$deadline" ]; do
    if agent_wget "$API/v1/agent/$NODE/command" >/dev/null; then
      set -- $(head -n 1 "$WORK/answer")
      case "${1:-wait}" in
        wait) ;;
        poweroff) return 0 ;;
        reboot) reboot -f ;;
        write-image)
          log "write-image is not implemented in this ramdisk yet"
          return 1
          ;;
        *) log "unknown command '$1'" ;;
      esac
    fi
    sleep 5
  done
  log "no command within $wait_s s"
  return 1
}

# ---------------------------------------------------------------------------

network_up || exit 1

case "$PURPOSE" in
  inspect)
    introspection_json >"$WORK/introspection.json"
    log "introspection: $(wc -c <"$WORK/introspection.json") bytes"
    # the token is spent by this call: there is nothing left to do but power off
    post_json introspection "$WORK/introspection.json"
    ;;
  clean | deploy) command_loop ;;
  *)
    log "unknown purpose '$PURPOSE'"
    exit 1
    ;;
esac
