# Registration run by stackctl in the identity service's client container (python3 reading this
# program on stdin): service users in the service project, catalog services and endpoints, and the
# cloud's starter flavours, images and networks (external network, floating-IP subnet, tenant network, router). stackctl puts one line in front of it, `SPEC = "<base64 JSON>"`,
# so that code and data, passwords included, travel on stdin together and never in an argv.
# Every object is compared first and kept when equal; it prints one JSON line per object.
import base64, io, json, sys
import requests
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import session as ks_session
from keystoneauth1.identity import v3
from urllib3.util.retry import Retry

spec = json.loads(base64.b64decode(SPEC))
auth = spec["auth"]

# A request that could not connect never reached Keystone: it is tried again, 7 times in all over
# about a minute (a VIP moving between load balancers, a listener not up yet). One that connected
# and then failed is not (it may have been carried out). Connecting gets 10 s, an answer 120 s.
CONNECT_TRIES = int(spec.get("connect_tries", 7))
CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 120


class BoundedAdapter(requests.adapters.HTTPAdapter):
    def send(self, request, timeout=None, **kwargs):
        return super().send(request, timeout=timeout or (CONNECT_TIMEOUT_S, READ_TIMEOUT_S), **kwargs)


def http():
    s = requests.Session()
    retry = Retry(total=CONNECT_TRIES - 1, connect=CONNECT_TRIES - 1, read=0, status=0, backoff_factor=1,
                  raise_on_status=False)
    for scheme in ("http://", "https://"):
        s.mount(scheme, BoundedAdapter(max_retries=retry))
    return s


def session(user, password, project):
    plugin = v3.Password(auth_url=auth["url"], username=user, password=password, project_name=project,
                         user_domain_id="default", project_domain_id="default")
    # the cloud's CA when the internal endpoints are https:// (tls.internal), else the system's
    return ks_session.Session(auth=plugin, session=http(), verify=auth.get("cafile") or True)


def say(obj, name, action, detail=""):
    print(json.dumps({"object": obj, "name": name, "action": action, "detail": detail}), flush=True)


def first(items):
    items = list(items)
    return items[0] if items else None


admin = session(auth["user"], auth["password"], auth["project"])
opts = dict(session=admin, interface="internal", region_name=auth["region"])
# The admin token first: an unreachable Keystone or a wrong password fails here, before any object.
if any(spec.get(k) for k in ("users", "services", "flavors", "images", "external_network", "tenant_network")):
    admin.get_token()

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
    import hashlib
    from glanceclient import Client as glance_client
    glance = glance_client("2", **opts)

    def find(name):
        """The active image of that name (or None), and every image of that name."""
        have = list(glance.images.list(filters={"name": name}))
        return next((x for x in have if x.status == "active"), None), have

    def upload(name, data, disk_format, container_format, **props):
        """The active image of that name, uploaded first when there is none; and whether it was."""
        img, have = find(name)
        if img is not None:
            return img, False
        for x in have:  # a killed upload leaves a queued image behind
            glance.images.delete(x.id)
        img = glance.images.create(name=name, disk_format=disk_format, container_format=container_format,
                                   visibility="public", **props)
        glance.images.upload(img.id, io.BytesIO(data))
        return img, True

    for i in spec["images"]:
        if i.get("build") != "guest":
            _, made = upload(i["name"], b"\0" * (i["size_kb"] * 1024), "raw", "bare")
            say("image", i["name"], "created" if made else "unchanged", str(i["size_kb"]) + " KiB raw" if made else "")
            continue
        # The guest image: its kernel and initramfs checked against the digests of its build before
        # anything is uploaded; then a raw root disk that names them. Nova's libvirt driver boots the
        # kernel directly with the image's os_command_line.
        files = {}
        for part in ("kernel", "initrd"):
            data = base64.b64decode(i[part])
            got = hashlib.sha256(data).hexdigest()
            if got != i[part + "_sha256"]:
                sys.exit("guest image %s: its %s has sha256 %s, not the %s of its build: nothing uploaded"
                         % (i["name"], part, got, i[part + "_sha256"]))
            files[part] = data
        main, _ = find(i["name"])
        if main is not None:
            say("image", i["name"], "unchanged")
            continue
        # raw/bare, not aki/ari: before a live migration the destination's Nova fetches the kernel
        # and ramdisk through its image format check, which refuses an aki or ari whose content
        # qemu-img reads as raw (every kernel and initramfs); raw passes it, and the boot is the same.
        kernel, _ = upload(i["name"] + "-kernel", files["kernel"], "raw", "bare",
                           stackctl_kernel_package=i["kernel_package"], stackctl_sha256=i["kernel_sha256"])
        ramdisk, _ = upload(i["name"] + "-ramdisk", files["initrd"], "raw", "bare", stackctl_sha256=i["initrd_sha256"])
        upload(i["name"], b"\0" * i["root_bytes"], "raw", "bare", kernel_id=kernel.id, ramdisk_id=ramdisk.id,
               os_command_line=i["cmdline"])
        say("image", i["name"], "created", "guest: %s %s, initramfs %d bytes"
            % (i["kernel_package"], i["kernel_version"], len(files["initrd"])))

ext = spec.get("external_network")
ten = spec.get("tenant_network")
if ext or ten:
    import ipaddress
    from openstack import connection
    net_api = connection.Connection(session=admin, region_name=auth["region"], interface="internal").network
    project_id = admin.get_project_id()

    def one(kind, items):
        items = list(items)
        if len(items) > 1:
            raise SystemExit("more than one %s named %s: remove the extra ones" % (kind, items[0].name))
        return items[0] if items else None

    def ensure_network(name, **attrs):
        cur = one("network", net_api.networks(name=name, project_id=project_id))
        if cur is None:
            cur = net_api.create_network(name=name, **attrs)
            say("network", name, "created", attrs.get("provider_network_type", "tenant"))
        else:
            say("network", name, "unchanged")
        return cur

    def ensure_subnet(net, name, **attrs):
        cur = one("subnet", net_api.subnets(network_id=net.id, name=name))
        if cur is None:
            cur = net_api.create_subnet(network_id=net.id, name=name, ip_version=4, **attrs)
            say("subnet", name, "created", attrs["cidr"])
        elif cur.cidr != attrs["cidr"]:
            say("subnet", name, "differs", "cidr %s, not %s: delete it to have it made again" % (cur.cidr, attrs["cidr"]))
        else:
            say("subnet", name, "unchanged", cur.cidr)
        return cur

    ext_net = None
    if ext:
        ext_net = ensure_network(ext["name"], is_router_external=True, is_shared=False,
                                 provider_network_type="flat", provider_physical_network=ext["physnet"])
        first, last = ext["floating_range"]
        ensure_subnet(ext_net, ext["name"] + "-subnet", cidr=ext["cidr"], gateway_ip=ext["gateway"],
                      is_dhcp_enabled=False, allocation_pools=[{"start": first, "end": last}])
    if ten:
        net = ensure_network(ten["name"])
        cidr = ipaddress.ip_network(ten["cidr"], strict=False)
        sub = ensure_subnet(net, ten["name"] + "-subnet", cidr=str(cidr), is_dhcp_enabled=True,
                            dns_nameservers=[])
        router = one("router", net_api.routers(name=ten["router"], project_id=project_id))
        gw = {"network_id": ext_net.id} if ext_net is not None else None
        if router is None:
            router = net_api.create_router(name=ten["router"], **({"external_gateway_info": gw} if gw else {}))
            say("router", ten["router"], "created")
        elif gw and (router.external_gateway_info or {}).get("network_id") != ext_net.id:
            router = net_api.update_router(router, external_gateway_info=gw)
            say("router", ten["router"], "updated", "gateway " + ext["name"])
        else:
            say("router", ten["router"], "unchanged")
        if not any(p.device_id == router.id for p in net_api.ports(network_id=net.id, device_id=router.id)):
            net_api.add_interface_to_router(router, subnet_id=sub.id)
            say("router", ten["router"], "updated", "interface on " + ten["name"])
