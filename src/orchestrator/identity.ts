/**
 * Step 5's Keystone work: service users, catalog endpoints, and the starter
 * flavours and images. It runs as a Python program inside the bootstrap
 * node's keystone container (whose image carries the OpenStack client
 * libraries), fed on stdin together with its input: passwords never appear in
 * an argv, a log line or the journal. Every action is idempotent: existing
 * objects are compared and kept, so a re-run changes nothing.
 */
import { RemoteError, StackctlError } from '../core/errors.js';
import { sha256 } from '../core/hash.js';
import type { Secret } from '../core/secret.js';
import type { ExecOptions, ExecResult, RemoteCommand } from '../remote/index.js';
import type { IdentityAccess, RunOnceWork } from './planner.js';

/** Where the program runs: the keystone container of the bootstrap node. */
export const IDENTITY_CLIENT = { container: 'keystone', python: 'python3' } as const;

/** Deadline of one identity program run (image uploads included). */
const IDENTITY_TIMEOUT_MS = 5 * 60_000;

type IdentityWork = Extract<RunOnceWork, { kind: 'register' | 'resources' }>;

/** One line the program prints per object: never a secret. */
export interface IdentityAction {
  readonly object: 'project' | 'user' | 'role' | 'service' | 'endpoint' | 'flavor' | 'image';
  readonly name: string;
  readonly action: 'created' | 'updated' | 'unchanged' | 'differs';
  readonly detail?: string;
}

/** The run-once hash of a registration: its inputs' and its password's digest. */
export function identityHash(
  w: Extract<RunOnceWork, { kind: 'register' }>,
  secret: (name: string) => Secret | undefined,
): string {
  const pw = secret(w.passwordSecret);
  return pw ? sha256(`${w.hash}\n${sha256(pw.reveal())}`) : w.hash;
}

/**
 * The program. Its input is the SPEC constant (base64 JSON) put in front of
 * it, so stdin carries code and data in one stream.
 */
const PROGRAM = String.raw`
import base64, io, json, sys
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import session as ks_session
from keystoneauth1.identity import v3

spec = json.loads(base64.b64decode(SPEC))
auth = spec["auth"]


def session(user, password, project):
    plugin = v3.Password(auth_url=auth["url"], username=user, password=password, project_name=project,
                         user_domain_id="default", project_domain_id="default")
    return ks_session.Session(auth=plugin, timeout=60)


def say(obj, name, action, detail=""):
    print(json.dumps({"object": obj, "name": name, "action": action, "detail": detail}), flush=True)


def first(items):
    items = list(items)
    return items[0] if items else None


admin = session(auth["user"], auth["password"], auth["project"])
opts = dict(session=admin, interface="internal", region_name=auth["region"])

if spec.get("users") or spec.get("services"):
    from keystoneclient.v3 import client as keystone_client
    ks = keystone_client.Client(**opts)

for u in spec.get("users", []):
    project = first(ks.projects.list(name=u["project"], domain="default"))
    if project is None:
        project = ks.projects.create(u["project"], "default", description="OpenStack service users")
        say("project", u["project"], "created")
    user = first(ks.users.list(name=u["name"], domain="default"))
    if user is None:
        user = ks.users.create(u["name"], domain="default", password=u["password"], default_project=project)
        say("user", u["name"], "created")
        fresh = True
    else:
        fresh = False
    for r in u["roles"]:
        role = first(ks.roles.list(name=r))
        if role is None:
            role = ks.roles.create(r)
            say("role", r, "created")
        ks.roles.grant(role, user=user, project=project)
    if not fresh:
        try:
            session(u["name"], u["password"], u["project"]).get_token()
            say("user", u["name"], "unchanged")
        except ks_exc.Unauthorized:
            ks.users.update(user, password=u["password"])
            say("user", u["name"], "updated", "password")

for s in spec.get("services", []):
    svc = first(x for x in ks.services.list(type=s["type"]) if x.name == s["name"])
    if svc is None:
        svc = ks.services.create(s["name"], type=s["type"])
        say("service", s["name"], "created", s["type"])
    current = ks.endpoints.list(service=svc, region=auth["region"])
    for e in s["endpoints"]:
        name = s["name"] + "/" + e["interface"]
        have = [x for x in current if x.interface == e["interface"]]
        if have and have[0].url == e["url"]:
            say("endpoint", name, "unchanged", e["url"])
        elif have:
            ks.endpoints.update(have[0], url=e["url"])
            say("endpoint", name, "updated", e["url"])
        else:
            ks.endpoints.create(svc, e["url"], interface=e["interface"], region=auth["region"])
            say("endpoint", name, "created", e["url"])

if spec.get("flavors"):
    from novaclient import client as nova_client
    nova = nova_client.Client("2.1", **opts)
    have = {f.name: f for f in nova.flavors.list(is_public=None)}
    for f in spec["flavors"]:
        cur = have.get(f["name"])
        if cur is None:
            nova.flavors.create(f["name"], f["ram_mb"], f["vcpus"], f["disk_gb"])
            say("flavor", f["name"], "created")
        elif (cur.ram, cur.vcpus, cur.disk) != (f["ram_mb"], f["vcpus"], f["disk_gb"]):
            say("flavor", f["name"], "differs", "flavours are immutable: delete it to have it made again")
        else:
            say("flavor", f["name"], "unchanged")

if spec.get("images"):
    from glanceclient import Client as glance_client
    glance = glance_client("2", **opts)
    for i in spec["images"]:
        have = [x for x in glance.images.list(filters={"name": i["name"]})]
        if any(x.status == "active" for x in have):
            say("image", i["name"], "unchanged")
            continue
        for x in have:  # a killed upload leaves a queued image behind
            glance.images.delete(x.id)
        img = glance.images.create(name=i["name"], disk_format="raw", container_format="bare",
                                   visibility="public")
        glance.images.upload(img.id, io.BytesIO(b"\0" * (i["size_kb"] * 1024)))
        say("image", i["name"], "created", str(i["size_kb"]) + " KiB raw")
`;

/** What the executor hands over. */
export interface IdentityRunner {
  exec(command: RemoteCommand, opts: ExecOptions): Promise<ExecResult>;
  readonly node: string;
}

/** Build the program's input for one piece of work. */
function specOf(
  w: IdentityWork,
  identity: IdentityAccess,
  secret: (name: string) => Secret | undefined,
): { spec: unknown; secrets: string[] } {
  const need = (name: string, what: string): string => {
    const s = secret(name);
    if (!s) {
      throw new StackctlError('E_SECRET_MISSING', `secret '${name}' (${what}) is missing`, {
        hint: "Run 'stackctl secrets generate' for this inventory.",
      });
    }
    return s.reveal();
  };
  const adminPassword = need(identity.adminPasswordSecret, 'Keystone admin');
  const auth = {
    url: identity.authUrl,
    user: 'admin',
    password: adminPassword,
    project: 'admin',
    region: identity.region,
  };
  if (w.kind === 'register') {
    const password = need(w.passwordSecret, `Keystone user ${w.name}`);
    return {
      spec: {
        auth,
        users: [{ name: w.name, password, project: 'service', roles: w.roles }],
        services: w.catalog.map((c) => ({ type: c.type, name: c.name, endpoints: c.endpoints })),
      },
      secrets: [adminPassword, password],
    };
  }
  return { spec: { auth, flavors: w.resources.flavors, images: w.resources.images }, secrets: [adminPassword] };
}

/** Parse the program's output lines (other lines are ignored). */
export function parseIdentityOutput(stdout: string): IdentityAction[] {
  const out: IdentityAction[] = [];
  for (const line of stdout.split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      out.push(JSON.parse(line) as IdentityAction);
    } catch {
      /* not ours */
    }
  }
  return out;
}

/** Run one piece of step 5's identity work; returns what it did. */
export async function runIdentityWork(
  access: IdentityRunner,
  w: IdentityWork,
  identity: IdentityAccess | undefined,
  secret: (name: string) => Secret | undefined,
): Promise<IdentityAction[]> {
  if (!identity) {
    throw new StackctlError('E_NO_IDENTITY', `${w.service}: registration needs Keystone, which this plan lacks`, {
      hint: 'Deploy the keystone service (it is part of the Controller role).',
    });
  }
  const { spec, secrets } = specOf(w, identity, secret);
  // SPEC is defined before the program's first line: code and data travel on stdin together.
  const program = `SPEC = ${JSON.stringify(Buffer.from(JSON.stringify(spec)).toString('base64'))}\n${PROGRAM}`;
  const r = await access.exec(['docker', 'exec', '-i', IDENTITY_CLIENT.container, IDENTITY_CLIENT.python, '-'], {
    timeoutMs: IDENTITY_TIMEOUT_MS,
    stdin: program,
  });
  let err = r.stderr;
  for (const s of secrets) err = err.split(s).join('<redacted>');
  if (r.code !== 0) {
    const last = err.trim().split('\n').slice(-8).join('\n');
    throw new RemoteError(
      'E_IDENTITY',
      `${access.node}: ${w.kind === 'register' ? `registering ${w.service} in Keystone` : 'creating the flavours and images'} failed (exit ${r.code}): ${last}`,
      {
        hint: `Is the keystone container on ${access.node} healthy, and the internal VIP answering? The deploy can be re-run: done objects are kept.`,
      },
    );
  }
  return parseIdentityOutput(r.stdout);
}
