"""``schedctl acl ...`` and ``schedctl audit ...``: the command line of access control and of the
audit trail. The SDK methods and the audit file helpers are in ``schedd_client.acl``.

    acl bootstrap                         the first management token (once per cluster; shown once)
    acl whoami                            who the token authenticates as, and its grants
    acl anonymous [POLICY]                what calls without a token get (omitted: refused, the default)
    acl policy create NAME --rule PATTERN=CAP,CAP ... [--description D]
    acl role create NAME --policy P ... [--description D]
    acl token create [--role R ...] [--policy P ...] [--ttl 30d] [--worker --max-slots N]
    acl policy|role|token list | get NAME | delete NAME
    audit list [--since 1h] [--until 10m] [--principal P] [--target T] [--action A] [--outcome O] [--limit N]
               [--newest [--before-seq SEQ]]   newest first, a page at a time
    audit verify [FILE]                   the chain of each node's trail, or of an exported file
    audit export [--file PATH]            JSON lines (anchor first), for `audit verify FILE`
    audit config --max-age 30d --max-records N
    audit note TEXT                       an operator's note in the trail (cluster feature level 2)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


from schedd_proto import acl_pb2 as apb

from ._cli import _count, _global_options, _table, shard_count
from .acl import export_jsonl, verify_jsonl
from .convert import format_time, to_dict
from .errors import SchedError
from .specs import parse_duration


class AuditBroken(SchedError):
    """`audit verify` found a record that breaks the chain (exit status 1)."""


def _rule(text: str) -> tuple[str, list[str]]:
    pattern, sep, caps = text.partition("=")
    if not sep or not pattern or not caps:
        raise argparse.ArgumentTypeError(f"a rule is PATTERN=CAP[,CAP...], e.g. team:data=read,write; got {text!r}")
    return pattern.strip(), [c.strip() for c in caps.split(",") if c.strip()]


def _ms(text: str) -> int:
    try:
        return int(parse_duration(text) * 1000)
    except Exception as e:  # noqa: BLE001 - argparse reports it
        raise argparse.ArgumentTypeError(str(e)) from None


def add_commands(groups: Any, command: Any, time_arg: Any) -> None:
    """The ``acl`` and ``audit`` groups; ``groups``/``command`` are schedctl's parser helpers."""
    def group(parent: Any, name: str, help: str) -> Any:
        sub = parent.add_parser(name, help=help, description=help)
        _global_options(sub, top=False)
        return sub.add_subparsers(dest="command" if parent is groups else "what", required=True,
                                  metavar="COMMAND")

    acl = group(groups, "acl", "access control: bootstrap, policies, roles and tokens")
    command(acl, "bootstrap", acl_bootstrap, "create the first management token (once per cluster)")
    command(acl, "whoami", acl_whoami, "the principal your token authenticates as, and its grants")
    anon = command(acl, "anonymous", acl_anonymous, "the policy calls without a token get (none: refused)")
    anon.add_argument("policy", nargs="?", default="", metavar="POLICY", help="omit to refuse them again")
    for kind in ("policy", "role", "token"):
        sub = group(acl, kind, f"create, list, get and delete {kind} entries")
        create = command(sub, "create", ACL_CREATE[kind], f"create (or replace) a {kind}")
        if kind != "token":
            create.add_argument("name", metavar="NAME")
            create.add_argument("--description", default="")
        if kind == "policy":
            create.add_argument("--rule", dest="rules", type=_rule, action="append", required=True,
                                metavar="PATTERN=CAPS", help="e.g. team:data=read,write,trigger (repeatable)")
        elif kind == "role":
            create.add_argument("--policy", dest="policies", action="append", required=True, metavar="P")
        else:
            create.add_argument("--role", dest="roles", action="append", default=[], metavar="R")
            create.add_argument("--policy", dest="policies", action="append", default=[], metavar="P")
            create.add_argument("--ttl", type=_ms, default=0, metavar="D", help="expires after D (30d, 12h)")
            create.add_argument("--worker", action="store_true", help="a worker token (needs --max-slots)")
            create.add_argument("--max-slots", type=_count(1), default=0, metavar="N")
            create.add_argument("--description", default="")
        command(sub, "list", ACL_LIST[kind], f"every {kind}")
        get = command(sub, "get", ACL_GET[kind], f"one {kind}")
        get.add_argument("name", metavar="ACCESSOR" if kind == "token" else "NAME")
        delete = command(sub, "delete", ACL_DELETE[kind], f"delete a {kind}" +
                         (" (revoke it)" if kind == "token" else ""))
        delete.add_argument("name", metavar="ACCESSOR" if kind == "token" else "NAME")

    audit = group(groups, "audit", "the replicated, hash-chained audit trail")
    listing = command(audit, "list", audit_list, "audit records, oldest first")
    listing.add_argument("--since", type=time_arg, default=None, metavar="T", help="1h, 30m, or RFC 3339")
    for flag in ("principal", "target", "action", "outcome"):
        listing.add_argument(f"--{flag}", default="")
    listing.add_argument("--limit", type=_count(0), default=0, metavar="N")
    listing.add_argument("--until", type=time_arg, default=None, metavar="T", help="before this time (10m, or RFC 3339)")
    listing.add_argument("--newest", action="store_true", help="newest first (with --limit: the newest N)")
    listing.add_argument("--before-seq", type=_count(0), default=0, metavar="SEQ",
                         help="records with a lower seq only (the next page of --newest)")
    verify = command(audit, "verify", audit_verify,
                     "check the hash chain of every node's trail, or of an exported FILE")
    verify.add_argument("file", nargs="?", default="", metavar="FILE")
    export = command(audit, "export", audit_export, "the trail as JSON lines (anchor first)")
    export.add_argument("--file", default="", metavar="PATH", help="write here (default: stdout)")
    config = command(audit, "config", audit_config, "retention and the denied-record rate limit")
    config.add_argument("--max-age", type=_ms, required=True, metavar="D", help="e.g. 30d (0: no bound)")
    config.add_argument("--max-records", type=_count(0), required=True, metavar="N")
    config.add_argument("--denied-burst", type=_count(1), default=20, metavar="N")
    config.add_argument("--denied-refill", type=_ms, default=3000, metavar="D")
    note = command(audit, "note", audit_note, "record an operator's note in the trail (feature level 2)")
    note.add_argument("text", metavar="TEXT", help="1 to 256 characters, e.g. 'upgrading n2 to 0.2.0'")


# ---------------------------------------------------------------- acl


def _token_line(secret: apb.TokenSecret) -> str:
    t = secret.token
    return (f"accessor: {t.accessor}\nsecret:   {secret.secret}\n"
            f"kind: {t.kind}  roles: {','.join(t.roles) or '-'}  policies: {','.join(t.policies) or '-'}  "
            f"expires: {format_time(t.expires_ms) if t.expires_ms else 'never'}\n"
            "The secret is shown only now: store it (export SCHEDD_TOKEN=...).")


def acl_bootstrap(cmd: Any) -> None:
    out = cmd.client.acl_bootstrap()
    cmd.emit(to_dict(out), lambda: _token_line(out))


def acl_whoami(cmd: Any) -> None:
    out = cmd.client.acl_whoami()
    cmd.emit(to_dict(out), lambda: f"{out.principal or '(ACL disabled)'} ({out.kind or '-'})\n" + _rules(out.grants))


def acl_anonymous(cmd: Any) -> None:
    out = cmd.client.acl_set_anonymous(cmd.args.policy)
    cmd.emit(to_dict(out), lambda: f"calls without a token get policy {out.policy}" if out.policy
             else "calls without a token are refused")


def _rules(rules: Any) -> str:
    return "\n".join(f"  {r.pattern}: {', '.join(r.capabilities)}" for r in rules)


def _policy_create(cmd: Any) -> None:
    a = cmd.args
    out = cmd.client.acl_put_policy(a.name, dict(a.rules), a.description)
    cmd.emit(to_dict(out), lambda: f"policy {out.name} saved\n{_rules(out.rules)}")


def _role_create(cmd: Any) -> None:
    a = cmd.args
    out = cmd.client.acl_put_role(a.name, a.policies, a.description)
    cmd.emit(to_dict(out), lambda: f"role {out.name} saved: policies {', '.join(out.policies)}")


def _token_create(cmd: Any) -> None:
    a = cmd.args
    if a.worker and not a.max_slots:
        raise SchedError("a worker token needs --max-slots N")
    out = cmd.client.acl_create_token(roles=a.roles, policies=a.policies, kind="worker" if a.worker else "client",
                                      ttl_ms=a.ttl, max_slots=a.max_slots, description=a.description)
    cmd.emit(to_dict(out), lambda: _token_line(out))


def _policy_list(cmd: Any) -> None:
    out = cmd.client.acl_list_policies()
    cmd.emit(to_dict(out), lambda: _table(("NAME", "RULES", "DESCRIPTION"), [
        (p.name + (" (anonymous)" if p.name == out.anonymous_policy else ""),
         "; ".join(f"{r.pattern}={','.join(r.capabilities)}" for r in p.rules), p.description)
        for p in out.policies], empty="no policies"))


def _role_list(cmd: Any) -> None:
    out = cmd.client.acl_list_roles()
    cmd.emit(to_dict(out), lambda: _table(("NAME", "POLICIES", "DESCRIPTION"), [
        (r.name, ",".join(r.policies), r.description) for r in out.roles], empty="no roles"))


def _token_list(cmd: Any) -> None:
    out = cmd.client.acl_list_tokens()
    cmd.emit(to_dict(out), lambda: _table(("ACCESSOR", "KIND", "ROLES", "POLICIES", "EXPIRES", "DESCRIPTION"), [
        (t.accessor, t.kind + (f"/{t.max_slots}" if t.max_slots else ""), ",".join(t.roles) or "-",
         ",".join(t.policies) or "-", format_time(t.expires_ms) if t.expires_ms else "never", t.description)
        for t in out.tokens], empty="no tokens"))


def _get(kind: str):
    def run(cmd: Any) -> None:
        out = getattr(cmd.client, f"acl_get_{kind}")(cmd.args.name)
        cmd.emit(to_dict(out), lambda: "\n".join(f"{k}: {v}" for k, v in to_dict(out).items()))
    return run


def _delete(kind: str):
    def run(cmd: Any) -> None:
        out = getattr(cmd.client, f"acl_delete_{kind}")(cmd.args.name)
        cmd.emit(to_dict(out), lambda: f"{kind} {out.name} deleted")
    return run


ACL_CREATE = {"policy": _policy_create, "role": _role_create, "token": _token_create}
ACL_LIST = {"policy": _policy_list, "role": _role_list, "token": _token_list}
ACL_GET = {k: _get(k) for k in ACL_CREATE}
ACL_DELETE = {k: _delete(k) for k in ACL_CREATE}


# ---------------------------------------------------------------- audit


def audit_list(cmd: Any) -> None:
    a = cmd.args
    since = a.since(cmd.clock()) if a.since is not None else 0
    until = a.until(cmd.clock()) if a.until is not None else 0
    out = cmd.client.audit_list(since_ms=since, principal=a.principal, target=a.target, action=a.action,
                                outcome=a.outcome, limit=a.limit, until_ms=until, newest_first=a.newest,
                                before_seq=a.before_seq)
    sharded = any(r.shard for r in out.records)        # a sharded cluster: seq counts within a shard
    cmd.emit([to_dict(r) for r in out.records], lambda: _table(
        ("SEQ", "TIME", "PRINCIPAL", "SOURCE", "ACTION", "TARGET", "OUTCOME", "INDEX", "DETAIL"),
        [(f"{r.shard}:{r.seq}" if sharded else r.seq, format_time(r.time_ms), r.principal, r.source, r.action,
          r.target, r.outcome, r.log_index or "-", r.detail[:80]) for r in out.records], empty="no audit records"))


def audit_export(cmd: Any) -> None:
    shards = shard_count(cmd.client)
    if shards > 1:           # one section per shard group: each trail is its own chain
        text = "".join(export_jsonl(cmd.client.audit_list(shard=k), shard=k) for k in range(shards))
    else:
        text = export_jsonl(cmd.client.audit_list())
    if cmd.args.file:
        Path(cmd.args.file).write_text(text)
        print(f"wrote {text.count(chr(10)) - 1} records to {cmd.args.file}", file=sys.stderr)
    else:
        sys.stdout.write(text)


def audit_verify(cmd: Any) -> None:
    if cmd.args.file:
        bad, n = verify_jsonl(Path(cmd.args.file).read_text())
        if bad is not None:
            raise AuditBroken(f"{cmd.args.file}: the chain breaks at line {bad} (after {n} good records)")
        cmd.emit({"ok": True, "records": n}, lambda: f"{cmd.args.file}: {n} records, chain intact")
        return
    rows = []
    for address in cmd.client.addresses:
        try:
            v = cmd.client.audit_verify(address=address)
            rows.append((address, v.answered_by, v.records, "ok" if v.ok else f"BROKEN at seq {v.broken_at_seq}",
                         v.head[:16]))
        except SchedError as e:
            rows.append((address, "-", "-", f"unreachable: {e.message}", "-"))
    cmd.emit([dict(zip(("address", "node", "records", "chain", "head"), r)) for r in rows],
             lambda: _table(("ADDRESS", "NODE", "RECORDS", "CHAIN", "HEAD"), rows, empty="no nodes"))
    if any(r[3] != "ok" for r in rows):
        raise AuditBroken("the audit chain does not verify on every node")


def audit_note(cmd: Any) -> None:
    out = cmd.client.audit_note(cmd.args.text)
    r = out.record
    cmd.emit(to_dict(out), lambda: f"noted in the audit trail (record {r.seq}, log index {r.log_index}): {r.target}")


def audit_config(cmd: Any) -> None:
    a = cmd.args
    out = cmd.client.audit_configure(max_age_ms=a.max_age, max_records=a.max_records,
                                     denied_burst=a.denied_burst, denied_refill_ms=a.denied_refill)
    cmd.emit(to_dict(out), lambda: f"audit retention: {out.max_age_ms // 1000}s, {out.max_records} records; "
                                   f"denied: burst {out.denied_burst}, one per {out.denied_refill_ms} ms")
