"""A local certificate authority for a schedd deployment: the CA, node, worker, admin and user certs.

Why our own CA and not the system trust store: schedd's TLS is between parties of one cluster
(nodes, workers, operators), and the question a node asks of a peer is "which principal of THIS
cluster is it", never "does the public web vouch for this name". A private CA that the operator
holds answers exactly that, and `schedd local` can make one without any tooling (no openssl on
the PATH: everything is `cryptography`).

Naming convention (one place: `principal_uri` / `principal_of_uri`): every leaf certificate
carries exactly one URI SAN ``spiffe://schedd/<kind>/<name>``, kind one of node | worker | admin |
user, name 1-64 of ``A-Z a-z 0-9 . _ -``. The principal of a peer is the path ``<kind>/<name>`` (e.g.
``worker/w1``). The CN repeats it for humans reading ``openssl x509 -text``; nothing trusts the
CN. The SPIFFE form keeps the door open to a real SPIFFE issuer later.

What a kind grants (schedd.api.auth): admin, the management policy; node and worker, nothing
without a token; user, nothing at all: it is how a team member's schedctl gets past `[tls]
client_ca`, and the team's token decides what the call may do. Without it, operators handed
teams the admin certificate, which is the management identity whenever no token is sent.

Keys are ECDSA P-256: BoringSSL (gRPC) accepts it everywhere, Ed25519 leaf certs it does not.
Node certs are for server AND client auth (a node serves clients and dials other nodes); worker,
admin and user certs for client auth only. The CA is pathlen 0: it signs leaves, never sub-CAs.

Files: keys 0600, certs 0644, each written atomically (temporary file, fsync, link into place,
fsync the directory), so a crash never leaves half a key under its final name. Nothing is
overwritten unless ``overwrite=True``; without it, every target is checked BEFORE anything is
written, so a refused call writes nothing at all.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

TRUST_DOMAIN = "schedd"
KINDS = ("node", "worker", "admin", "user")
NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
KEY_MODE, CERT_MODE, DIR_MODE = 0o600, 0o644, 0o700
CA_DAYS, LEAF_DAYS = 3650, 825
CLOCK_SKEW = dt.timedelta(minutes=5)        # not-before in the past: peers' clocks differ
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class CertError(ValueError):
    """A name, host or file that cannot make a certificate; the message says which and why."""


@dataclass(slots=True, frozen=True)
class Issued:
    """Where a certificate and its private key were written."""
    cert: Path
    key: Path


@dataclass(slots=True, frozen=True)
class CA:
    """A loaded CA: what `issue` needs to sign, and where its certificate lives."""
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    cert_path: Path


@dataclass(slots=True, frozen=True)
class NodeSpec:
    """A node to certify: its id and the names clients dial it by (DNS names and IPs mixed;
    each is sorted into a DNS or IP SAN)."""
    node_id: str
    hosts: Sequence[str] = LOCAL_HOSTS


@dataclass(slots=True)
class Deployment:
    """What `create_deployment` laid out: the directory, the CA, and each leaf by principal."""
    root: Path
    ca: Issued
    leaves: dict[str, Issued] = field(default_factory=dict)   # "worker/w1" -> files


# --------------------------------------------------------------------------- naming

def principal_uri(kind: str, name: str) -> str:
    """The URI SAN naming `kind/name`; refuses an unknown kind or a name outside NAME_RE."""
    if kind not in KINDS:
        raise CertError(f"certificate kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if not NAME_RE.match(name):
        raise CertError(f"{kind} name must be 1-64 of A-Z a-z 0-9 . _ -, got {name!r}")
    return f"spiffe://{TRUST_DOMAIN}/{kind}/{name}"


def principal_of_uri(uri: str) -> str | None:
    """``kind/name`` for a URI made by `principal_uri`, None for any other URI."""
    prefix = f"spiffe://{TRUST_DOMAIN}/"
    if not uri.startswith(prefix):
        return None
    kind, sep, name = uri[len(prefix):].partition("/")
    if not sep or kind not in KINDS or not NAME_RE.match(name):
        return None
    return f"{kind}/{name}"


def principal_of_uris(uris: Iterable[str]) -> str | None:
    """The one principal named among `uris` (other URIs ignored), else None. Two different
    schedd URIs in one certificate name nobody: an issuer error, not a choice to guess."""
    found = {p for p in map(principal_of_uri, uris) if p is not None}
    return found.pop() if len(found) == 1 else None


def split_hosts(hosts: Iterable[str]) -> tuple[list[str], list[IpAddress]]:
    """Sort host names into DNS names and IP addresses (``[::1]`` accepted for IPv6)."""
    dns: list[str] = []
    ips: list[IpAddress] = []
    for h in hosts:
        bare = h[1:-1] if h.startswith("[") and h.endswith("]") else h
        try:
            ips.append(ipaddress.ip_address(bare))
            continue
        except ValueError:
            pass
        if not re.match(r"^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9-]{1,63})*$", h):
            raise CertError(f"not a DNS name or IP address: {h!r}")
        dns.append(h.lower())
    return dns, ips


# --------------------------------------------------------------------------- building

def _now(now: dt.datetime | None) -> dt.datetime:
    return now if now is not None else dt.datetime.now(dt.UTC)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, TRUST_DOMAIN),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def build_ca(common_name: str = "schedd CA", *, days: int = CA_DAYS,
             now: dt.datetime | None = None) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A self-signed CA certificate and its key (in memory)."""
    key, start = _new_key(), _now(now)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (x509.CertificateBuilder()
            .subject_name(_name(common_name)).issuer_name(_name(common_name))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start - CLOCK_SKEW).not_valid_after(start + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=True, crl_sign=True,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(ski, critical=False)
            .sign(key, hashes.SHA256()))
    return cert, key


def build_leaf(ca: CA, kind: str, name: str, *, hosts: Iterable[str] = (), days: int = LEAF_DAYS,
               now: dt.datetime | None = None) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A leaf certificate for `kind/name` signed by `ca` (in memory). Nodes get server and client
    auth and the DNS/IP SANs of `hosts`; workers and admins client auth only and no host SANs."""
    uri = principal_uri(kind, name)
    dns, ips = split_hosts(hosts)
    if kind != "node" and (dns or ips):
        raise CertError(f"only node certificates carry host names; {kind} {name!r} got {list(hosts)}")
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if kind == "node"
              else [ExtendedKeyUsageOID.CLIENT_AUTH])
    sans: list[x509.GeneralName] = [x509.UniformResourceIdentifier(uri)]
    sans += [x509.DNSName(d) for d in dns] + [x509.IPAddress(i) for i in ips]
    key, start = _new_key(), _now(now)
    ca_ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (x509.CertificateBuilder()
            .subject_name(_name(f"{kind}/{name}")).issuer_name(ca.cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start - CLOCK_SKEW).not_valid_after(start + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=False, crl_sign=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                           critical=False)
            .sign(ca.key, hashes.SHA256()))
    return cert, key


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


# --------------------------------------------------------------------------- files

def refuse_existing(paths: Iterable[Path]) -> None:
    """Raise FileExistsError naming every path that exists (checked before anything is written)."""
    present = [str(p) for p in paths if os.path.lexists(p)]
    if present:
        raise FileExistsError(f"not overwriting {', '.join(present)} (move them away first, "
                              "or ask to overwrite)")


def write_atomic(path: Path, data: bytes, mode: int, *, overwrite: bool = False) -> Path:
    """Write `data` to `path` with `mode` (whatever the umask), atomically and durably.

    The bytes go to a temporary file in the same directory, are fsynced, then take the final name:
    by link (fails if the name exists: no race with another writer) or, with `overwrite`, by
    rename; then the directory is fsynced. A reader sees the old file or the whole new one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    _fsync_dir(path.parent)
    return path


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_pair(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey, cert_path: Path,
                key_path: Path, overwrite: bool) -> Issued:
    if not overwrite:
        refuse_existing([cert_path, key_path])
    cert_path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    write_atomic(key_path, key_pem(key), KEY_MODE, overwrite=overwrite)     # key first: a cert
    write_atomic(cert_path, cert_pem(cert), CERT_MODE, overwrite=overwrite)  # never lacks its key
    return Issued(cert=cert_path, key=key_path)


def leaf_paths(directory: Path, kind: str, name: str) -> Issued:
    """The file names of a leaf in a deployment directory: ``<kind>-<name>.pem`` / ``-key.pem``."""
    principal_uri(kind, name)                                   # validates kind and name
    return Issued(cert=Path(directory) / f"{kind}-{name}.pem",
                  key=Path(directory) / f"{kind}-{name}-key.pem")


def ca_paths(directory: Path) -> Issued:
    return Issued(cert=Path(directory) / "ca.pem", key=Path(directory) / "ca-key.pem")


def create_ca(directory: Path, *, common_name: str = "schedd CA", days: int = CA_DAYS,
              overwrite: bool = False, now: dt.datetime | None = None) -> Issued:
    """Make a CA and write ``ca.pem`` (0644) and ``ca-key.pem`` (0600) in `directory`."""
    cert, key = build_ca(common_name, days=days, now=now)
    paths = ca_paths(directory)
    return _write_pair(cert, key, paths.cert, paths.key, overwrite)


def load_ca(directory: Path) -> CA:
    """Load ``ca.pem`` and ``ca-key.pem`` from `directory`; CertError says what is wrong."""
    paths = ca_paths(directory)
    try:
        cert = x509.load_pem_x509_certificate(paths.cert.read_bytes())
        key = serialization.load_pem_private_key(paths.key.read_bytes(), password=None)
    except (OSError, ValueError) as e:
        raise CertError(f"cannot load the CA from {directory}: {e}") from e
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != cert.public_key():
        raise CertError(f"{paths.key} is not the private key of {paths.cert}")
    return CA(cert=cert, key=key, cert_path=paths.cert)


def issue(ca: CA, directory: Path, kind: str, name: str, *, hosts: Iterable[str] = (),
          days: int = LEAF_DAYS, overwrite: bool = False, now: dt.datetime | None = None) -> Issued:
    """Sign a leaf for `kind/name` and write it to `directory` (see `leaf_paths`)."""
    paths = leaf_paths(directory, kind, name)
    cert, key = build_leaf(ca, kind, name, hosts=hosts, days=days, now=now)
    return _write_pair(cert, key, paths.cert, paths.key, overwrite)


def create_deployment(directory: Path, *, nodes: Sequence[NodeSpec | str] = (),
                      workers: Sequence[str] = (), admins: Sequence[str] = (),
                      users: Sequence[str] = (),
                      overwrite: bool = False, now: dt.datetime | None = None) -> Deployment:
    """Lay out a directory an operator can copy from: ca.pem, ca-key.pem, node-<id>.pem and
    node-<id>-key.pem per node, worker-<name>*.pem, admin-<name>*.pem, user-<name>*.pem.

    A node given as a plain id is certified for LOCAL_HOSTS. Every name is validated and every
    target checked before the first file is written: a refused call leaves the directory as it
    was. The CA key belongs offline once the deployment is made (docs/security-tls.md)."""
    directory = Path(directory)
    specs = [n if isinstance(n, NodeSpec) else NodeSpec(n) for n in nodes]
    wanted = ([("node", s.node_id) for s in specs] + [("worker", w) for w in workers]
              + [("admin", a) for a in admins] + [("user", u) for u in users])
    seen: set[tuple[str, str]] = set()
    for kind, name in wanted:
        if (kind, name) in seen:
            raise CertError(f"{kind} {name!r} is listed twice")
        seen.add((kind, name))
    targets = [ca_paths(directory)] + [leaf_paths(directory, k, n) for k, n in wanted]
    for s in specs:
        split_hosts(s.hosts)
    if not overwrite:
        refuse_existing([p for t in targets for p in (t.cert, t.key)])
    directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    ca_files = create_ca(directory, overwrite=overwrite, now=now)
    ca = load_ca(directory)
    hosts = {s.node_id: s.hosts for s in specs}
    out = Deployment(root=directory, ca=ca_files)
    for kind, name in wanted:
        node_hosts = hosts[name] if kind == "node" else ()
        out.leaves[f"{kind}/{name}"] = issue(ca, directory, kind, name, hosts=node_hosts,
                                             overwrite=overwrite, now=now)
    return out
