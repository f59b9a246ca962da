#!/usr/bin/env bash
# The main job: on a fresh Debian machine (root, Node 20), build stackctl and the
# release images, bring up the 1ctl-1comp container lab, deploy the whole cloud on it
# and say how to use it. Re-running it is safe: unchanged images are not rebuilt,
# `lab up` and `deploy` converge (a second run changes nothing).
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
phase "the lab: 1 controller + 1 compute, virtual BMCs, registry"
stackctl lab up --kind container --topology 1ctl-1comp --name "$name" -i "$inv"
phase "push the images to the lab registry"
stackctl images push
phase "deploy the cloud"
stackctl deploy -i "$inv"
stackctl openrc -i "$inv" -o "$dir/$name.openrc"
phase "status"
stackctl status -i "$inv"
cat <<USAGE

The cloud is up ($((SECONDS - t0)) s). Use it:

  . $dir/$name.openrc
  openstack compute service list
  openstack --os-compute-api-version 2.37 server create --flavor m1.tiny --image lab-tiny --nic none --wait demo
  openstack server list

Nova runs its fake virt driver in the lab (no KVM here): servers go ACTIVE, nothing boots.
Check it:    node dist/src/cli/bin.js status -i $inv
Remove it:   node dist/src/cli/bin.js lab down -i $inv --purge
USAGE
