#!/usr/bin/env bash
# The main job: on a fresh Debian machine (root, Node 20), build stackctl, the release
# images and the guest image, bring up the 1ctl-1comp container lab with libvirt/QEMU on
# its compute, deploy the whole cloud on it, boot a server on the tenant network with a
# floating IP and reach it from this machine (ping, HTTP, SSH), and say how to use it.
# Re-running it is safe: unchanged images are not rebuilt, `lab up` and `deploy`
# converge (a second run changes nothing), and the server, its key pair, security
# group and floating IP are made only when missing.
#
#   STACKCTL_LAB_DIR   where the lab's inventory, secrets, keys and openrc go (.stackctl/lab)
#   STACKCTL_LAB_NAME  lab and cloud name (lab)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=host-setup.sh
. scripts/host-setup.sh
# the OpenStack client, for the operator on this machine
host_setup python3-openstackclient

dir=${STACKCTL_LAB_DIR:-$PWD/.stackctl/lab}
name=${STACKCTL_LAB_NAME:-lab}
inv="$dir/$name.yaml"
mkdir -p "$dir"
stackctl() { node dist/src/cli/bin.js "$@"; }
t0=$SECONDS
phase() { echo; echo "== $* ($((SECONDS - t0)) s)"; }

phase "build stackctl"
npm run build --silent
phase "container images (built once, then cached by their definition's hash)"
stackctl images build
phase "the guest image the cloud boots (Debian kernel + busybox initramfs, cached by its inputs)"
stackctl images build guest
phase "the lab: 1 controller + 1 compute (libvirt, QEMU TCG), virtual BMCs, registry"
if [ -f "$inv" ] && grep -q 'nova_compute_driver: fake' "$inv"; then
  echo "$inv is a lab whose computes run Nova's fake driver (an older main job made it): remove it first with" >&2
  echo "  node dist/src/cli/bin.js lab down -i $inv --purge" >&2
  exit 1
fi
stackctl lab up --kind container --topology 1ctl-1comp --compute libvirt --name "$name" -i "$inv"
phase "push the images to the lab registry"
stackctl images push
phase "deploy the cloud"
stackctl deploy -i "$inv"
stackctl openrc -i "$inv" -o "$dir/$name.openrc"
phase "status"
# Neutron counts a chassis registered during the deploy alive at its next health round (its
# agent_down_time / 2): give a fresh cloud up to 2 minutes to settle, then show the verdict
for _ in $(seq 1 12); do
  stackctl status -i "$inv" >/dev/null 2>&1 && break
  sleep 10
done
stackctl status -i "$inv"

phase "a server on the tenant network, reached from this machine through a floating IP"
# shellcheck source=/dev/null
. "$dir/$name.openrc"
key="$dir/guest-key"
# the private key stays on this machine: Nova gets the public half
[ -f "$key" ] || ssh-keygen -q -t ed25519 -N '' -C "guest-key@$name" -f "$key"
openstack keypair show guest-key >/dev/null 2>&1 ||
  openstack keypair create --public-key "$key.pub" guest-key >/dev/null
if ! openstack security group show guest-sg >/dev/null 2>&1; then
  openstack security group create guest-sg >/dev/null
  openstack security group rule create --ingress --protocol icmp guest-sg >/dev/null
  for port in 22 80; do
    openstack security group rule create --ingress --protocol tcp --dst-port "$port" guest-sg >/dev/null
  done
fi
openstack server show guest-1 >/dev/null 2>&1 ||
  openstack server create --flavor m1.tiny --image lab-guest --network demo-net \
    --security-group guest-sg --key-name guest-key --wait guest-1 >/dev/null
port=$(openstack port list --server guest-1 -f value -c ID | head -n1)
fip=$(openstack floating ip list --port "$port" -f value -c "Floating IP Address" | head -n1)
if [ -z "$fip" ]; then
  fip=$(openstack floating ip create public -f value -c floating_ip_address)
  openstack server add floating ip guest-1 "$fip"
fi
# wait_for SECONDS WHAT COMMAND...: until the command succeeds, or fail saying what did not come
wait_for() {
  local limit=$1 what=$2 start=$SECONDS
  shift 2
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS - start > limit)); then
      echo "guest-1 ($fip): no $what within $limit s; its console: openstack console log show guest-1" >&2
      exit 1
    fi
    sleep 2
  done
  echo "guest-1 ($fip): $what after $((SECONDS - start)) s"
}
ssh_guest() {
  ssh -i "$key" -o BatchMode=yes -o IdentitiesOnly=yes -o ConnectTimeout=5 -o StrictHostKeyChecking=no \
    -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR "root@$fip" "$@"
}
wait_for 180 "ping answer" busybox ping -c 1 -W 2 "$fip"
wait_for 120 "HTTP answer" curl -sf --max-time 5 "http://$fip/cgi-bin/state"
wait_for 300 "SSH login (its key from the metadata service)" ssh_guest true
state=$(curl -sf --max-time 5 "http://$fip/cgi-bin/state")
echo "guest-1 says over HTTP: $state; over SSH: $(ssh_guest uname -sr)"

cat <<USAGE

The cloud is up and serves a guest ($((SECONDS - t0)) s). Use it:

  . $dir/$name.openrc
  openstack server list
  ssh -i $key root@$fip
  curl http://$fip/cgi-bin/state

guest-1 is on demo-net behind the router, with the floating IP $fip; /cgi-bin/state
gives its boot id and a counter that advances every 100 ms (a reboot resets both).

The compute runs libvirt with QEMU's TCG (no KVM in the lab): a guest boots in tens of seconds.
Check it:    node dist/src/cli/bin.js status -i $inv
Remove it:   node dist/src/cli/bin.js lab down -i $inv --purge
USAGE
