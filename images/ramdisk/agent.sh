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
WORK=${STACKCTL_WORK:-/run/stackctl}
mkdir -p "$WORK"

if [ "${STACKCTL_AGENT_LIB:-}" != 1 ] && { [ -z "$API" ] || [ -z "$NODE" ] || [ -z "$TOKEN" ]; }; then
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
# deploy and clean
#
# The deploy host answers GET /v1/agent/<node>/command with lines:
#   wait                              nothing yet: ask again in a few seconds
#   deploy                            then:
#     image URL SHA256 RAW BYTES      the compressed disk image (.lzo, .gz), its checksum,
#                                     its raw size and its own size
#     hint KEY VALUE                  root device hints (every one must match)
#     hostkey TYPE COMMENT            make the SSH host key in the deployed system, report its public half
#     file MODE PATH BASE64           a file to write into the deployed system
#   clean                             wipe the partition tables and the ends of every disk
#   poweroff                          nothing to do: power off
#   end                               the last line of every answer: one without it was cut short
# The server hands a command out once (a command with secrets) or until the
# next heartbeat: a cut-short answer is asked for again, a refusal (4xx) ends
# the boot with a failed result. The answer stays in $WORK (RAM) and is never
# printed. Every step ends with POST /result, which spends the token.

SYSFS=${STACKCTL_SYSFS:-/sys}
DEVDIR=${STACKCTL_DEVDIR:-/dev}

# Disks worth writing to, one kernel name a line.
disk_names() {
  for d in "$SYSFS"/block/*; do
    name=${d##*/}
    case "$name" in loop* | ram* | zram* | sr* | fd* | dm-* | md* | nbd*) continue ;; esac
    echo "$name"
  done
}

# Sets d_size d_serial d_wwn d_model d_vendor d_rot d_hctl for disk $1.
disk_attrs() {
  d="$SYSFS/block/$1"
  sectors=$(attr "$d/size")
  d_size=$((${sectors:-0} * 512))
  d_serial=$(attr "$d/serial")
  [ -n "$d_serial" ] || d_serial=$(attr "$d/device/serial")
  d_wwn=$(attr "$d/wwid")
  [ -n "$d_wwn" ] || d_wwn=$(attr "$d/device/wwid")
  d_model=$(attr "$d/device/model")
  d_vendor=$(attr "$d/device/vendor")
  d_rot=$(attr "$d/queue/rotational")
  d_hctl=
  [ -d "$d/device/scsi_device" ] && d_hctl=$(ls "$d/device/scsi_device" 2>/dev/null | head -n 1)
  return 0
}

# One line per disk, for error messages: name, size and what identifies it.
disks_seen() {
  seen=
  for n in $(disk_names); do
    disk_attrs "$n"
    seen="$seen${seen:+; }/dev/$n $d_size bytes${d_serial:+ serial $d_serial}${d_model:+ model $d_model}"
  done
  echo "${seen:-no disks}"
}

# True when disk $1 matches every hint of file $2 (lines "key value").
disk_matches() {
  disk_attrs "$1"
  while read -r key value; do
    case "$key" in
      '') ;;
      serial) [ "$d_serial" = "$value" ] || return 1 ;;
      wwn) [ "$d_wwn" = "$value" ] || return 1 ;;
      hctl) [ "$d_hctl" = "$value" ] || return 1 ;;
      name) [ "/dev/$1" = "$value" ] || return 1 ;;
      by_path) [ "$(readlink -f "$value" 2>/dev/null)" = "/dev/$1" ] || return 1 ;;
      model) case "$d_model" in *"$value"*) ;; *) return 1 ;; esac ;;
      vendor) case "$d_vendor" in *"$value"*) ;; *) return 1 ;; esac ;;
      rotational) [ "$d_rot" = "$value" ] || return 1 ;;
      size_gb) [ $((d_size / 1073741824)) -eq "$value" ] || return 1 ;;
      min_size_gb) [ $((d_size / 1073741824)) -ge "$value" ] || return 1 ;;
      *)
        log "unknown root device hint '$key'"
        return 1
        ;;
    esac
  done <"$2"
  return 0
}

# The root disk for hints file $1 and an image of $2 bytes: prints /dev/NAME,
# or prints why not and fails. No hints: the smallest disk the image fits on.
select_root_disk() {
  matched=
  count=0
  for n in $(disk_names); do
    if disk_matches "$n" "$1"; then
      matched="$matched $n"
      count=$((count + 1))
    fi
  done
  hints=$(tr '\n' ' ' <"$1" | sed 's/ *$//')
  if [ -z "$hints" ]; then
    best=
    best_size=0
    for n in $matched; do
      disk_attrs "$n"
      if [ "$d_size" -ge "$2" ] && { [ -z "$best" ] || [ "$d_size" -lt "$best_size" ]; }; then
        best=$n
        best_size=$d_size
      fi
    done
    if [ -z "$best" ]; then
      echo "no disk holds the $2-byte image; disks seen: $(disks_seen)"
      return 1
    fi
    echo "/dev/$best"
    return 0
  fi
  if [ "$count" -ne 1 ]; then
    echo "root device hints ($hints) match $count disks${matched:+ (${matched# })}; disks seen: $(disks_seen)"
    return 1
  fi
  n=${matched# }
  disk_attrs "$n"
  if [ "$d_size" -lt "$2" ]; then
    echo "/dev/$n ($d_size bytes) is smaller than the $2-byte image; disks seen: $(disks_seen)"
    return 1
  fi
  echo "/dev/$n"
}

# Seconds since boot, with decimals.
uptime_s() { cut -d' ' -f1 /proc/uptime; }

# Record how long step $1 took since $2 (uptime seconds), for the result
# (in a file: steps run in subshells too).
timing() { printf ',"%s":%s' "$1" "$(awk "BEGIN { printf \"%.1f\", $(uptime_s) - $2 }")" >>"$WORK/timings"; }
timings() { cat "$WORK/timings" 2>/dev/null; }

# POST /result: $1 ok|failed, $2 step, $3 message, $4 root device, $5 image sha256,
# $6 the SSH host key's public line.
report_result() {
  {
    printf '{"status":"%s","step":"%s"' "$1" "$2"
    opt_str message "${3:-}"
    opt_str root_device "${4:-}"
    [ -n "${5:-}" ] && printf ',"image_sha256":"%s"' "$5"
    opt_str host_key "${6:-}"
    t=$(timings)
    [ -n "$t" ] && printf ',"timings":{%s}' "${t#,}"
    printf '}\n'
  } >"$WORK/result.json"
  post_json result "$WORK/result.json"
}

# Heartbeats in the background while $WORK/step exists; its contents name the step.
heartbeat_start() {
  echo "$1" >"$WORK/step"
  (
    while [ -f "$WORK/step" ]; do
      printf '{"step":"%s"}' "$(cat "$WORK/step" 2>/dev/null)" >"$WORK/heartbeat.json"
      wget -q -O /dev/null --header "Authorization: Bearer $TOKEN" --header "Content-Type: application/json" \
        --post-file "$WORK/heartbeat.json" "$API/v1/agent/$NODE/heartbeat" >/dev/null 2>&1
      sleep 5
    done
  ) </dev/null >/dev/null 2>&1 &
}
heartbeat_step() { [ -f "$WORK/step" ] && echo "$1" >"$WORK/step"; }
heartbeat_stop() { rm -f "$WORK/step"; }

# The first partition of disk $1 (/dev/vda -> /dev/vda1, /dev/nvme0n1 -> /dev/nvme0n1p1).
first_partition() {
  case "$1" in *[0-9]) echo "${1}p1" ;; *) echo "${1}1" ;; esac
}

# Four bytes, little endian, of the number $1.
le32() {
  v=$1
  # shellcheck disable=SC2059
  printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $((v & 255)) $((v >> 8 & 255)) $((v >> 16 & 255)) $((v >> 24 & 255)))"
}

# Stretch the first msdos partition of $1 to the end of the disk (the file
# system follows at first boot: x-systemd.growfs).
grow_partition() {
  local name sectors start count
  name=${1##*/}
  sectors=$(attr "$SYSFS/block/$name/size")
  start=$(dd if="$1" bs=1 skip=454 count=4 2>/dev/null | od -An -tu4 | tr -d ' ')
  [ -n "$start" ] && [ "$start" -gt 0 ] || return 0
  count=$((sectors - start))
  [ "$count" -gt 0 ] && [ "$count" -le 4294967295 ] || return 0
  le32 "$count" | dd of="$1" bs=1 seek=458 count=4 conv=notrunc 2>/dev/null
}

# The decompressor for an image URL, by its extension.
decompressor() {
  case "$1" in
    *.lzo) echo "lzop -dc" ;;
    *.gz) echo "gunzip -c" ;;
    *) echo cat ;;
  esac
}

# Fetch, check, write. When the compressed image ($4 bytes) fits in RAM it is
# downloaded there first and checked before anything touches the disk;
# otherwise it is streamed from HTTP through the checksum and the
# decompressor onto the disk in one pass, and on a mismatch the first MiB
# (boot loader, partition table) is wiped. Either way nothing may boot an
# image whose checksum is not the recorded one.
write_image() {
  local url=$1 want=$2 dev=$3 size=${4:-0} got why t free_kb
  rm -f "$WORK/img.fifo" "$WORK"/st.* "$WORK/image"
  free_kb=$(df -k "$WORK" 2>/dev/null | awk 'NR == 2 { print $4 }')
  if [ "$size" -gt 0 ] && [ $((size / 1024 + 65536)) -lt "${free_kb:-0}" ]; then
    heartbeat_step image-transfer
    t=$(uptime_s)
    if ! wget -q -O "$WORK/image" "$url" 2>"$WORK/wget.err"; then
      rm -f "$WORK/image"
      echo "download failed: $(head -n 1 "$WORK/wget.err")"
      return 1
    fi
    timing image-transfer "$t"
    heartbeat_step verify-image
    t=$(uptime_s)
    got=$(sha256sum "$WORK/image" | cut -d' ' -f1)
    timing verify-image "$t"
    if [ "$got" != "$want" ]; then
      rm -f "$WORK/image"
      echo "image sha256 mismatch: expected $want, downloaded $got (nothing written to $dev)"
      return 1
    fi
    heartbeat_step write-image
    t=$(uptime_s)
    if ! $(decompressor "$url") <"$WORK/image" >"$dev" 2>"$WORK/unpack.err"; then
      rm -f "$WORK/image"
      dd if=/dev/zero of="$dev" bs=1048576 count=1 conv=notrunc,fsync 2>/dev/null
      echo "decompression failed: $(head -n 1 "$WORK/unpack.err") (first MiB of $dev wiped)"
      return 1
    fi
    rm -f "$WORK/image"
    sync
    timing write-image "$t"
    return 0
  fi
  heartbeat_step stream-image
  t=$(uptime_s)
  mkfifo "$WORK/img.fifo"
  sha256sum <"$WORK/img.fifo" >"$WORK/img.sum" &
  sumpid=$!
  {
    wget -q -O - "$url" 2>"$WORK/wget.err"
    echo $? >"$WORK/st.wget"
  } | tee "$WORK/img.fifo" | {
    $(decompressor "$url") >"$dev" 2>"$WORK/unpack.err"
    echo $? >"$WORK/st.unpack"
  }
  wait "$sumpid"
  sync
  timing stream-image "$t"
  got=$(cut -d' ' -f1 "$WORK/img.sum" 2>/dev/null)
  why=
  [ "$(cat "$WORK/st.wget" 2>/dev/null)" = 0 ] || why="download failed: $(head -n 1 "$WORK/wget.err" 2>/dev/null)"
  [ -n "$why" ] || [ "$(cat "$WORK/st.unpack" 2>/dev/null)" = 0 ] || why="decompression failed: $(head -n 1 "$WORK/unpack.err" 2>/dev/null)"
  [ -n "$why" ] || [ "$got" = "$want" ] || why="image sha256 mismatch: expected $want, streamed ${got:-nothing}"
  if [ -n "$why" ]; then
    dd if=/dev/zero of="$dev" bs=1048576 count=1 conv=notrunc,fsync 2>/dev/null
    sync
    echo "$why (first MiB of $dev wiped)"
    return 1
  fi
  return 0
}

# Make the node's SSH host key (type $2, comment $3) in the deployed system
# mounted at $1, with that system's own ssh-keygen: the private half is born
# on the node and never leaves it. Prints the public line; on failure, why.
# The fingerprint goes to the console, where an operator can compare it with
# what stackctl recorded (stackctl nodes trust shows it).
host_key() {
  local root=$1 type=$2 comment=$3 key rc fp
  case "$type" in
    ed25519) ;;
    *)
      echo "unsupported host key type '$type'"
      return 1
      ;;
  esac
  key=/etc/ssh/ssh_host_${type}_key
  if [ ! -x "$root/usr/bin/ssh-keygen" ]; then
    echo "the image has no /usr/bin/ssh-keygen (Debian openssh-client) to make the SSH host key"
    return 1
  fi
  # ssh-keygen asks before overwriting, and a key that came with the image is no node's own
  rm -f "$root$key" "$root$key.pub"
  mkdir -p "$root/dev" "$root/etc/ssh"
  # ssh-keygen opens /dev/null (and may read /dev/urandom): the ramdisk's devices, for this run only
  if ! mount -o bind /dev "$root/dev" 2>"$WORK/keygen.err"; then
    echo "cannot mount /dev into the deployed system: $(head -n 1 "$WORK/keygen.err")"
    return 1
  fi
  chroot "$root" /usr/bin/ssh-keygen -q -t "$type" -N '' -C "$comment" -f "$key" </dev/null >"$WORK/keygen.err" 2>&1
  rc=$?
  fp=$(chroot "$root" /usr/bin/ssh-keygen -l -f "$key.pub" 2>/dev/null)
  umount "$root/dev"
  if [ $rc -ne 0 ] || [ ! -s "$root$key.pub" ]; then
    echo "ssh-keygen failed: $(head -n 1 "$WORK/keygen.err")"
    return 1
  fi
  log "SSH host key: $fp"
  head -n 1 "$root$key.pub"
}

# Write the command's `file` lines into the file system mounted at $1.
write_files() {
  while read -r kw mode path b64; do
    [ "$kw" = file ] || continue
    mkdir -p "$1$(dirname "$path")"
    (umask 077 && echo "$b64" | base64 -d >"$1$path") || return 1
    chmod "$mode" "$1$path" || return 1
  done <"$WORK/command"
  # authorized_keys is refused by sshd unless .ssh is private
  [ -d "$1/root/.ssh" ] && chmod 700 "$1/root/.ssh"
  return 0
}

do_deploy() {
  set -- $(grep '^image ' "$WORK/command" | head -n 1)
  url=${2:-} want=${3:-} raw=${4:-0} bytes=${5:-0}
  rm -f "$WORK/timings"
  grep '^hint ' "$WORK/command" | cut -d' ' -f2- >"$WORK/hints"
  heartbeat_start select-disk
  if ! dev=$(select_root_disk "$WORK/hints" "$raw"); then
    heartbeat_stop
    log "$dev"
    report_result failed select-disk "$dev"
    return 1
  fi
  log "writing the image to $dev"
  if ! why=$(write_image "$url" "$want" "$dev" "$bytes"); then
    heartbeat_stop
    log "$why"
    report_result failed verify-image "$why" "$dev"
    return 1
  fi
  log "image fetched, verified and written ($(timings | sed 's/^,//'))"
  heartbeat_step configure
  t0=$(uptime_s)
  grow_partition "$dev"
  blockdev --rereadpt "$dev" 2>/dev/null || partprobe "$dev" 2>/dev/null
  part=$(first_partition "$dev")
  n=0
  while [ ! -b "$part" ] && [ $n -lt 50 ]; do
    sleep 0.1
    n=$((n + 1))
  done
  mkdir -p /mnt/root
  if ! mount -t ext4 "$part" /mnt/root 2>"$WORK/mount.err"; then
    heartbeat_stop
    why="cannot mount $part: $(head -n 1 "$WORK/mount.err")"
    log "$why"
    report_result failed configure "$why" "$dev" "$want"
    return 1
  fi
  if ! write_files /mnt/root; then
    umount /mnt/root
    heartbeat_stop
    report_result failed configure "writing the node's files failed" "$dev" "$want"
    return 1
  fi
  pub=
  set -- $(grep '^hostkey ' "$WORK/command" | head -n 1)
  if [ -n "${2:-}" ] && ! pub=$(host_key /mnt/root "$2" "${3:-root@localhost}"); then
    umount /mnt/root
    heartbeat_stop
    log "$pub"
    report_result failed configure "$pub" "$dev" "$want"
    return 1
  fi
  umount /mnt/root
  sync
  timing configure "$t0"
  heartbeat_stop
  log "deployed to $dev"
  report_result ok deploy "image written to $dev" "$dev" "$want" "$pub"
}

# Wipe every disk's partition tables (MBR and GPT at the start, the GPT
# backup at the end): the disk no longer boots and the next deploy starts clean.
do_clean() {
  rm -f "$WORK/timings"
  heartbeat_start clean
  t0=$(uptime_s)
  wiped=
  for n in $(disk_names); do
    disk_attrs "$n"
    mib=$((d_size / 1048576))
    [ "$mib" -gt 0 ] || continue
    dd if=/dev/zero of="$DEVDIR/$n" bs=1048576 count=1 conv=notrunc,fsync 2>/dev/null
    [ "$mib" -gt 2 ] && dd if=/dev/zero of="$DEVDIR/$n" bs=1048576 seek=$((mib - 1)) count=1 conv=notrunc,fsync 2>/dev/null
    wiped="$wiped /dev/$n"
  done
  sync
  timing clean "$t0"
  heartbeat_stop
  log "cleaned:${wiped:- no disks}"
  report_result ok clean "wiped the partition tables and ends of:${wiped:- no disks}"
}

command_loop() {
  wait_s=$(cmdline_arg stackctl.wait) || wait_s=600
  deadline=$(($(cut -d. -f1 /proc/uptime) + wait_s))
  while [ "$(cut -d. -f1 /proc/uptime)" -lt "$deadline" ]; do
    if ! why=$(agent_wget "$API/v1/agent/$NODE/command"); then
      case "$why" in
        *" 4"[0-9][0-9]" "*)
          # handed out once: asking again cannot help; the deploy host arms the node anew
          log "command refused: $why"
          report_result failed command "the boot server refused the command ($why)"
          return 1
          ;;
      esac
    elif [ "$(tail -n 1 "$WORK/answer")" != end ]; then
      log "the command was cut short ($(wc -c <"$WORK/answer") bytes): asking again"
      rm -f "$WORK/answer"
    else
      mv "$WORK/answer" "$WORK/command"
      case "$(head -n 1 "$WORK/command")" in
        wait) ;;
        poweroff) return 0 ;;
        deploy)
          do_deploy
          return
          ;;
        clean)
          do_clean
          return
          ;;
        *) log "unknown command '$(head -n 1 "$WORK/command" | cut -c1-32)'" ;;
      esac
    fi
    sleep 5
  done
  log "no command within $wait_s s"
  return 1
}

# ---------------------------------------------------------------------------

# sourced by the tests for its functions only
[ "${STACKCTL_AGENT_LIB:-}" = 1 ] && return 0

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
