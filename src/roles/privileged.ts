/**
 * What `privileged: true` in a service file means to Docker: every capability
 * but CAP_SYS_RESOURCE plus unconfined seccomp and AppArmor, every device
 * allowed (`--device-cgroup-rule 'a *:* rwm'`: libvirt gives its guests
 * /dev/kvm and tap devices through the devices cgroup, which cannot allow what
 * the container's own denies) and no masked or read-only /proc and /sys paths
 * (Neutron's metadata agent sets sysctls in the namespaces it makes). Plain
 * --privileged fails with Docker 20.10 on hosts that lack that capability (the
 * lab's container nodes among them); this set works on both.
 *
 * A table, not code in the engine, because the plan hashes it into every
 * privileged container's hash: a change here recreates exactly those
 * containers at the next deploy, which a change of mapping hidden in code
 * would not (their declaration, and so their hash, would stay the same).
 */
export const PRIVILEGED_OPTIONS = {
  capAdd: ['ALL'],
  capDrop: ['SYS_RESOURCE'],
  securityOpt: ['seccomp=unconfined', 'apparmor=unconfined'],
  deviceCgroupRules: ['a *:* rwm'],
  unmaskPaths: true,
} as const satisfies {
  readonly capAdd: readonly string[];
  readonly capDrop: readonly string[];
  readonly securityOpt: readonly string[];
  readonly deviceCgroupRules: readonly string[];
  readonly unmaskPaths: boolean;
};
