"""The layers and what each may import (docs/architecture.md), checked on the source itself.

Every module is parsed (not imported), so an import hidden inside a function counts as much as
one at the top. A rule names, for each unit (a distribution's package, or a subpackage of the
daemon), the other units it may import; anything else is a violation. Third-party and stdlib
imports are not checked here, except the client's: installing schedd-client must not pull in the
daemon's dependencies, so its code may not import them either. Within each distribution's
package, no module may import itself back through others (`test_no_import_cycles`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Where each distribution keeps its packages.
SOURCES = {
    "schedd": ROOT / "schedd",
    "schedd_proto": ROOT / "client" / "schedd_proto",
    "schedd_client": ROOT / "client" / "schedd_client",
    "schedd_worker": ROOT / "worker" / "schedd_worker",
}

OURS = frozenset(SOURCES)

#: unit -> the units it may import (itself always allowed). Units of the daemon are its subpackages.
ALLOWED: dict[str, frozenset[str]] = {
    "schedd_proto": frozenset(),
    # The outbound network policy: the leader's SLA webhooks and the worker's HTTP handlers both
    # obey it, and schedd-client is the one distribution both install. It imports nothing of ours.
    "schedd_client.net": frozenset(),
    "schedd_client": frozenset({"schedd_proto", "schedd_client.net"}),
    "schedd_worker": frozenset({"schedd_client", "schedd_client.net", "schedd_proto"}),
    "schedd.ports": frozenset(),
    # Certificates and TLS credentials (cryptography, grpc); no scheduling code.
    "schedd.security": frozenset(),
    # A node's settings as typed values (parsed by runtime/config.py); what the layers read.
    "schedd.settings": frozenset({"schedd_client.net"}),
    "schedd.core": frozenset(),
    # A node's finished executions on disk (SQLite), derived from the log; the API reads it,
    # the composition root opens it and hands it to the Raft shell through a port.
    "schedd.history": frozenset({"schedd.core"}),
    # What this build is and understands (versions, formats, the zone data schedules depend on).
    "schedd.versions": frozenset({"schedd.core", "schedd_proto"}),   # PROTOCOL_VERSION
    "schedd.replication": frozenset({"schedd.core", "schedd.ports", "schedd.versions"}),
    # The leader opens job secrets (schedd.security.secrets) for the worker an attempt goes to.
    "schedd.leader": frozenset({"schedd.core", "schedd.versions", "schedd.ports", "schedd.settings", "schedd.security",
                                "schedd.replication", "schedd_client.net", "schedd_proto"}),
    "schedd.api": frozenset({"schedd.core", "schedd.versions", "schedd.ports", "schedd.settings", "schedd.replication",
                             "schedd.leader", "schedd.security", "schedd.history", "schedd_proto"}),
    "schedd.testing": frozenset({"schedd.core", "schedd.versions", "schedd.ports", "schedd.settings", "schedd_proto",
                                 "schedd_worker"}),     # the worker's history Recorder, shared
    # The web dashboard: it reaches the state only through the node's own gRPC API (schedd_proto);
    # from the core it takes pure functions (the ACL's pattern match, to show only the buttons a
    # principal's grants allow): it holds no handle to a node's state to call them on.
    "schedd.dashboard": frozenset({"schedd_proto", "schedd.core"}),
    # The composition root wires everything; `schedd local` runs a worker and uses the SDK.
    "schedd.runtime": frozenset({"schedd.core", "schedd.versions", "schedd.ports", "schedd.settings", "schedd.security",
                                 "schedd.replication", "schedd.history",
                                 "schedd.leader", "schedd.api", "schedd.testing", "schedd.dashboard", "schedd_proto",
                                 "schedd_client", "schedd_client.net", "schedd_worker"}),
    "schedd": frozenset({"schedd.runtime"}),          # schedd/__main__.py
}

#: Third-party modules the client distribution does not install.
DAEMON_ONLY_DEPS = frozenset({"pysyncobj", "croniter", "sortedcontainers", "prometheus_client",
                              "uvloop", "cryptography", "aiohttp",
                              "holidays", "icalendar", "dateutil"})     # calendars, expanded at the API edge


@dataclass(frozen=True, slots=True)
class Import:
    module: str          # the importing module
    target: str          # the imported module, absolute
    line: int


def unit_of(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "schedd" and len(parts) > 1 and parts[1] != "__main__":
        return ".".join(parts[:2])
    if parts[:2] == ["schedd_client", "net"]:
        return "schedd_client.net"
    return parts[0]


def module_name(package_dir: Path, path: Path) -> str:
    rel = path.relative_to(package_dir.parent).with_suffix("")
    name = ".".join(rel.parts)
    return name.removesuffix(".__init__")


def imports_of(path: Path, module: str) -> list[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(module, a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append(Import(module, target, node.lineno))
    return found


def all_imports() -> list[Import]:
    found: list[Import] = []
    for package_dir in SOURCES.values():
        for path in sorted(package_dir.rglob("*.py")):
            if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                continue                                # generated; imports only its siblings
            found += imports_of(path, module_name(package_dir, path))
    return found


def violations(found: list[Import]) -> list[str]:
    bad = []
    for imp in found:
        top = imp.target.split(".")[0]
        src = unit_of(imp.module)
        if top in OURS:
            dst = unit_of(imp.target)
            if dst != src and dst not in ALLOWED.get(src, frozenset()):
                bad.append(f"{imp.module}:{imp.line} imports {imp.target} ({src} may not import {dst})")
        elif top in DAEMON_ONLY_DEPS and src in ("schedd_client", "schedd_proto", "schedd_worker"):
            bad.append(f"{imp.module}:{imp.line} imports {imp.target}, a dependency of the daemon only")
    return bad


def test_every_unit_has_a_rule():
    units = {unit_of(i.module) for i in all_imports()}
    assert units - set(ALLOWED) == set(), "add the new package to ALLOWED (and docs/architecture.md)"


def test_layers_import_only_what_they_may():
    assert violations(all_imports()) == []


@pytest.mark.parametrize("module, target", [
    ("schedd.core.state", "schedd.replication.node"),
    ("schedd.core.dags", "schedd.runtime.clock"),
    ("schedd_client.schedctl", "schedd.core.schedule"),
    ("schedd_client.worker", "schedd_worker.runtime"),
    ("schedd_worker.runtime", "schedd.testing.hooks"),
    ("schedd.ports.clock", "schedd.core.model"),
    ("schedd.leader.sla", "schedd_client.client"),
    ("schedd_client.net.policy", "schedd_client.client"),
    ("schedd.replication.node", "schedd.runtime.config"),
    ("schedd.api.limits", "schedd.runtime.config"),
    ("schedd.settings", "schedd.core.model"),
])
def test_a_forbidden_import_is_reported(module, target):
    """The check itself can fail: each of these edges was in the tree before the layering."""
    assert violations([Import(module, target, 1)]) != []


def test_a_daemon_dependency_in_the_client_is_reported():
    assert violations([Import("schedd_client.schedctl", "croniter", 1)]) != []
    assert violations([Import("schedd.core.schedule", "croniter", 1)]) == []


def test_a_function_local_import_counts(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from schedd.leader import assigner\n")
    assert [i.target for i in imports_of(f, "schedd.core.m")] == ["schedd.leader"]
    assert violations(imports_of(f, "schedd.core.m")) != []


def test_relative_imports_resolve(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from . import x\nfrom ..leader import y\n")
    assert [i.target for i in imports_of(f, "schedd.core.m")] == ["schedd.core", "schedd.leader"]


# ---------------------------------------------------------------- no import cycles between modules
#
# Within a package too, a module that imports another must not be imported by it, directly or
# through others: a cycle means two modules share a piece that belongs in a third (what both
# import). Every import counts, at the top, inside a function or under TYPE_CHECKING alike, so a
# cycle is not hidden by moving its import into a function.


def module_edges(found: list[Import], modules: frozenset[str]) -> dict[str, set[str]]:
    """module -> the modules of ours it imports: `from pkg import name` is an edge to `pkg.name`
    when that is a module, else to `pkg` (a package is its __init__)."""
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for imp in found:
        target = imp.target
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != imp.module:
            edges[imp.module].add(target)
    return edges


def imports_by_name(path: Path, module: str, modules: frozenset[str]) -> list[Import]:
    """`imports_of`, with `from pkg import name` pointing at the module `pkg.name` if there is one."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    by_line = {(i.line, i.target) for i in imports_of(path, module)}
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = next(t for line, t in by_line if line == node.lineno)
            for alias in node.names:
                sub = f"{base}.{alias.name}" if base else alias.name
                found.append(Import(module, sub if sub in modules else base, node.lineno))
        elif isinstance(node, ast.Import):
            found += [Import(module, a.name, node.lineno) for a in node.names]
    return found


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: each strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


@pytest.mark.parametrize("package", ["schedd", "schedd_client", "schedd_worker"])
def test_no_import_cycles(package):
    package_dir = SOURCES[package]
    paths = {module_name(package_dir, p): p for p in sorted(package_dir.rglob("*.py"))
             if not p.name.endswith(("_pb2.py", "_pb2_grpc.py"))}
    modules = frozenset(paths)
    found = [imp for m, p in paths.items() for imp in imports_by_name(p, m, modules)]
    edges = module_edges(found, modules)
    described = [" <-> ".join(c) + ": " + "; ".join(f"{m} imports {', '.join(sorted(edges[m] & set(c)))}"
                                                    for m in c) for c in cycles(edges)]
    assert described == [], "\n".join(described)


def test_a_cycle_is_reported(tmp_path):
    """The check itself can fail: the cycles this tree had, each through an import in a function."""
    assert cycles({"core.commands": {"core.features"}, "core.features": {"core.commands", "core.tables"},
                   "core.tables": {"core.commands"}, "core.model": set()}) == [
        ["core.commands", "core.features", "core.tables"]]
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "client.py").write_text("from .context import load\n")
    (pkg / "context.py").write_text("def load():\n    from . import client\n")
    modules = frozenset({"pkg", "pkg.client", "pkg.context"})
    found = [i for m in ("client", "context") for i in imports_by_name(pkg / f"{m}.py", f"pkg.{m}", modules)]
    assert cycles(module_edges(found, modules)) == [["pkg.client", "pkg.context"]]
