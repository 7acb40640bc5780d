#!/usr/bin/env python3
"""Verify an airlock audit export (JSON Lines) with the published algorithm, airlock-audit-v1.

Usage: verify_export.py [--workspace ID] [--checkpoint SEQ:HEX] [--public-key HEX] [FILE | -]

Reads FILE (or standard input) and prints either

    ok N events head=<hex>

and exits 0, or

    bad seq N: <reason>

naming the first bad sequence number, and exits 1 (2 for a usage error).

The algorithm (independent of airlock; Python 3 standard library only, and the `cryptography`
package to check checkpoint signatures with --public-key):

  * Each line is one event of ONE workspace, in order seq = 1, 2, 3, ... without gaps: a JSON
    object with the members workspace_id, seq, at, actor, event_type, target, request_id,
    run_id, action_id, decision, payload_hash, result, metadata, prev_hash, hash.
  * event_bytes = the RFC 8785 (JCS) canonical UTF-8 form of the line's object WITHOUT
    prev_hash and hash.
  * prev_hash is 64 zero hex digits for seq 1, else the hash of the previous event.
  * hash = SHA-256(b"airlock-audit-v1\\n" + bytes.fromhex(prev_hash) + event_bytes), written
    as 64 lowercase hex digits.
  * --checkpoint SEQ:HEX (from a signed checkpoint kept outside the database) also requires
    the chain to reach SEQ with hash HEX there; that catches truncation and rewrites.
  * Each line must itself be canonical: exactly the RFC 8785 form of its object (airlock
    writes nothing else). Then event_bytes is the line with its prev_hash and hash members
    cut out, which is what `airlock audit verify` hashes; a line re-spelled in any other way
    (whitespace, escapes, number spellings, member order) is refused even when it means the
    same event.

Signed checkpoints (airlock-checkpoint-v1). An export ends with the workspace's checkpoints,
lines whose `type` member is "checkpoint":

    {"at": T, "head": H, "seq": N, "signature": S, "type": "checkpoint", "version": 1,
     "workspace_id": W}

  * message = b"airlock-checkpoint-v1\n" + JCS({"at": T, "head": H, "seq": N,
    "workspace_id": W}); S is the Ed25519 signature (128 hex digits) of message.
  * With --public-key HEX (64 hex digits: `airlock audit public-key`, obtained out of band),
    every checkpoint line's signature is checked (a bad one, or one of another workspace, is
    reported as "bad checkpoint line L: ..." and exits 1), and the chain is checked against every
    valid one: it must reach the newest (the highest N, named in the result) and have each
    one's hash at its N, so a rewrite is named at the first checkpoint it changed. Checking
    signatures needs the
    `cryptography` package (exit 2 without it). Without --public-key, checkpoint lines are
    ignored with a warning on standard error. With --public-key, the result line ends with
    "(checkpoint seq=N at=T)" or "(no checkpoint)".

Checks per event, in this order: the line's shape and canonical form, workspace, sequence
number, the event's own hash, its link to the previous event, the checkpoint. The same order and reasons as `airlock audit verify`.
"""

import hashlib
import json
import math
import re
import sys

DOMAIN = b"airlock-audit-v1\n"
GENESIS = bytes(32)
EVENT_FIELDS = (
    "workspace_id", "seq", "at", "actor", "event_type", "target", "request_id", "run_id",
    "action_id", "decision", "payload_hash", "result", "metadata",
)
OPTIONAL_STRINGS = ("target", "request_id", "run_id", "action_id", "decision", "payload_hash",
                    "result")
HASH_RE = re.compile(r"[0-9a-f]{64}\Z")
MAX_DEPTH = 127


class Bad(Exception):
    def __init__(self, seq, reason):
        super().__init__(f"bad seq {seq}: {reason}")
        self.seq = seq
        self.reason = reason


# ---- RFC 8785 (JCS) -------------------------------------------------------------------------

def es_number(x):
    """ECMAScript Number.prototype.toString for a finite float."""
    if math.isnan(x) or math.isinf(x):
        raise ValueError("number is not finite")
    if x == 0:
        return "0"  # also -0
    sign = "-" if x < 0 else ""
    r = repr(abs(x))  # shortest round-trip digits
    mant, _, exp = r.partition("e")
    int_part, _, frac_part = mant.partition(".")
    digits = int_part + frac_part
    n = len(int_part) + (int(exp) if exp else 0)  # x = 0.digits * 10^n
    stripped = digits.lstrip("0")
    n -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        s = digits + "0" * (n - k)
    elif 0 < n <= 21:
        s = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        s = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        s = digits[0] + ("." + digits[1:] if k > 1 else "") + "e" + ("+" if e >= 0 else "-") + str(abs(e))
    return sign + s


def jcs_number(v):
    if isinstance(v, int):
        try:
            s = es_number(float(v))
        except OverflowError:
            s = None
        if s != str(v):
            shown = str(v) if v.bit_length() <= 128 else "of %d bits" % v.bit_length()
            raise ValueError(f"integer {shown} cannot be represented exactly as an IEEE-754 double")
        return s
    return es_number(v)


def jcs_string(s):
    out = ['"']
    for ch in s:
        c = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif c < 0x20:
            out.append({8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r"}.get(c, "\\u%04x" % c))
        elif 0xD800 <= c <= 0xDFFF:
            raise ValueError("string contains a lone surrogate")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def jcs(v, depth=0):
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, (int, float)):
        return jcs_number(v)
    if isinstance(v, str):
        return jcs_string(v)
    if depth >= MAX_DEPTH:
        raise ValueError(f"json nests deeper than {MAX_DEPTH} arrays or objects")
    if isinstance(v, list):
        return "[" + ",".join(jcs(x, depth + 1) for x in v) + "]"
    if isinstance(v, dict):
        keys = sorted(v, key=lambda k: k.encode("utf-16-be", "surrogatepass"))
        return "{" + ",".join(jcs_string(k) + ":" + jcs(v[k], depth + 1) for k in keys) + "}"
    raise ValueError(f"unexpected value {v!r}")


def canonical_bytes(v):
    return jcs(v).encode("utf-8")


# ---- one line -------------------------------------------------------------------------------

def _pairs(pairs):
    obj = {}
    for k, v in pairs:
        if k in obj:
            raise ValueError("repeated object key")
        obj[k] = v
    return obj


def _no_constant(name):
    raise ValueError(f"{name} is not json")


def parse_line(line):
    """The line's object, checked for shape; raises ValueError."""
    obj = json.loads(line, object_pairs_hook=_pairs, parse_constant=_no_constant)
    if not isinstance(obj, dict):
        raise ValueError("line is not a json object")
    for name in EVENT_FIELDS + ("prev_hash", "hash"):
        if name not in obj:
            raise ValueError(f"member `{name}` is missing")
    for name in obj:
        if name not in EVENT_FIELDS and name not in ("prev_hash", "hash"):
            raise ValueError(f"member `{name}` is not part of an exported event")
    for name in ("prev_hash", "hash"):
        if not isinstance(obj[name], str) or not HASH_RE.match(obj[name]):
            raise ValueError(f"member `{name}` is not 64 lowercase hex digits")
    seq = obj["seq"]
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 2**64:
        raise ValueError("seq is not an unsigned integer")
    for name in ("workspace_id", "at", "event_type"):
        if not isinstance(obj[name], str):
            raise ValueError(f"`{name}` is not a string")
    for name in OPTIONAL_STRINGS:
        if obj[name] is not None and not isinstance(obj[name], str):
            raise ValueError(f"`{name}` is neither a string nor null")
    actor = obj["actor"]
    ok_actor = isinstance(actor, dict) and (
        (actor.get("kind") in ("human", "agent", "service") and set(actor) == {"kind", "id"}
         and isinstance(actor["id"], str))
        or actor == {"kind": "system"})
    if not ok_actor:
        raise ValueError("`actor` is not an actor")
    if not isinstance(obj["metadata"], dict):
        raise ValueError("event metadata is not a json object")
    return obj


# ---- the chain ------------------------------------------------------------------------------

def verify(lines, workspace=None, checkpoint=None):
    """Returns (count, head bytes); raises Bad. `checkpoint`: one (seq, head) or a dict of
    them (every checkpoint of an export: the chain must match each and reach the highest)."""
    if checkpoint is None:
        checkpoints = {}
    elif isinstance(checkpoint, dict):
        checkpoints = checkpoint
    else:
        checkpoints = {checkpoint[0]: checkpoint[1]}
    count, head, gap_at = 0, GENESIS, None
    for line_no, line in enumerate(lines, 1):
        if line.strip() == "":
            continue
        expected = count + 1
        try:
            obj = parse_line(line)
        except (ValueError, RecursionError) as e:
            if gap_at is not None:
                raise Bad(gap_at, f"event {gap_at} is missing")
            raise Bad(expected, f"line {line_no}: {e}")
        try:
            canonical_line = jcs(obj)
        except (ValueError, RecursionError) as e:
            if gap_at is not None:
                raise Bad(gap_at, f"event {gap_at} is missing")
            raise Bad(expected, f"event {expected} has no canonical form: {e}")
        if canonical_line != line:
            if gap_at is not None:
                raise Bad(gap_at, f"event {gap_at} is missing")
            raise Bad(expected, f"event {expected} is not stored in canonical form")
        seq = obj["seq"]
        if gap_at is not None:
            if seq == gap_at:
                raise Bad(gap_at, f"event {gap_at} is out of order")
            continue
        if workspace is None:
            workspace = obj["workspace_id"]
        elif obj["workspace_id"] != workspace:
            raise Bad(seq, f"event {seq} belongs to another workspace")
        if seq > expected:
            gap_at = expected
            continue
        if seq < expected:
            if seq == 0:
                raise Bad(seq, f"event {seq} is out of order")
            raise Bad(seq, f"sequence number {seq} appears more than once")
        prev = bytes.fromhex(obj.pop("prev_hash"))
        stored = bytes.fromhex(obj.pop("hash"))
        try:
            event_bytes = canonical_bytes(obj)
        except (ValueError, RecursionError) as e:
            raise Bad(seq, f"event {seq} has no canonical form: {e}")
        if hashlib.sha256(DOMAIN + prev + event_bytes).digest() != stored:
            raise Bad(seq, f"event {seq} was edited: its hash does not match its contents")
        if prev != head:
            raise Bad(seq, f"event {seq} does not link to the event before it")
        if checkpoints.get(seq, stored) != stored:
            raise Bad(seq, f"event {seq} does not match the checkpoint's head hash")
        count, head = seq, stored
    if gap_at is not None:
        raise Bad(gap_at, f"event {gap_at} is missing")
    if checkpoints:
        cp_seq = max(checkpoints)
        cp_head = checkpoints[cp_seq]
        if count < cp_seq:
            raise Bad(count + 1, f"chain ends at event {count} but a checkpoint covers event {cp_seq}")
        if cp_seq == 0 and cp_head != GENESIS:
            raise Bad(0, "event 0 does not match the checkpoint's head hash")
        if checkpoints.get(0, GENESIS) != GENESIS:
            raise Bad(0, "event 0 does not match the checkpoint's head hash")
    return count, head


CHECKPOINT_DOMAIN = b"airlock-checkpoint-v1\n"
SIG_RE = re.compile(r"[0-9a-f]{128}\Z")


class BadCheckpoint(Exception):
    pass


def split_checkpoints(lines):
    """(event lines, [(line number, checkpoint object)]): a line whose object has a `type`
    member is a checkpoint."""
    events, checkpoints = [], []
    for line_no, line in enumerate(lines, 1):
        obj = None
        if '"type"' in line:
            try:
                obj = json.loads(line, object_pairs_hook=_pairs, parse_constant=_no_constant)
            except (ValueError, RecursionError):
                obj = None
        if isinstance(obj, dict) and "type" in obj:
            checkpoints.append((line_no, obj))
        else:
            events.append(line)
    return events, checkpoints


def newest_checkpoint(checkpoints, workspace, public_key):
    """The (seq, head bytes, at) of the newest checkpoint whose signature verifies, and every
    valid checkpoint as {seq: head bytes}; raises BadCheckpoint for one that does not."""
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    except ImportError:
        print("checking checkpoint signatures needs the `cryptography` package", file=sys.stderr)
        raise SystemExit(2)
    try:
        key = Ed25519PublicKey.from_public_bytes(public_key)
    except ValueError:
        print("--public-key is not an Ed25519 public key", file=sys.stderr)
        raise SystemExit(2)
    newest, every = None, {}
    for line_no, cp in checkpoints:
        members = {"at", "head", "seq", "signature", "type", "version", "workspace_id"}
        seq = cp.get("seq")
        ok_shape = (set(cp) == members and cp["type"] == "checkpoint" and cp["version"] == 1
                    and isinstance(cp["at"], str) and isinstance(cp["workspace_id"], str)
                    and isinstance(seq, int) and not isinstance(seq, bool) and 0 <= seq < 2**53
                    and isinstance(cp["head"], str) and HASH_RE.match(cp["head"])
                    and isinstance(cp["signature"], str) and SIG_RE.match(cp["signature"]))
        if not ok_shape:
            raise BadCheckpoint(f"bad checkpoint line {line_no}: not a version 1 checkpoint")
        message = CHECKPOINT_DOMAIN + canonical_bytes(
            {"at": cp["at"], "head": cp["head"], "seq": seq, "workspace_id": cp["workspace_id"]})
        try:
            key.verify(bytes.fromhex(cp["signature"]), message)
        except InvalidSignature:
            raise BadCheckpoint(f"bad checkpoint line {line_no}: the signature does not verify")
        if workspace is not None and cp["workspace_id"] != workspace:
            raise BadCheckpoint(f"bad checkpoint line {line_no}: of another workspace")
        every[seq] = bytes.fromhex(cp["head"])
        if newest is None or seq >= newest[0]:
            newest = (seq, bytes.fromhex(cp["head"]), cp["at"])
    return newest, every


def first_workspace(lines):
    for line in lines:
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("workspace_id"), str):
            return obj["workspace_id"]
    return None


def read_lines(path):
    data = sys.stdin.buffer.read() if path in (None, "-") else open(path, "rb").read()
    text = data.decode("utf-8")  # strict: invalid UTF-8 is an error
    return text.split("\n")


def main(argv):
    workspace, checkpoint, path, public_key = None, None, None, None
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--workspace" and args:
            workspace = args.pop(0)
        elif a == "--checkpoint" and args:
            seq, _, hx = args.pop(0).partition(":")
            if not seq.isdigit() or not HASH_RE.match(hx):
                print("usage: --checkpoint SEQ:HEX (64 lowercase hex digits)", file=sys.stderr)
                return 2
            checkpoint = (int(seq), bytes.fromhex(hx))
        elif a == "--public-key" and args:
            hx = args.pop(0).strip()
            if not HASH_RE.match(hx):
                print("usage: --public-key HEX (64 lowercase hex digits)", file=sys.stderr)
                return 2
            public_key = bytes.fromhex(hx)
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        elif path is None and (a == "-" or not a.startswith("-")):
            path = a
        else:
            print("usage: verify_export.py [--workspace ID] [--checkpoint SEQ:HEX] "
                  "[--public-key HEX] [FILE | -]",
                  file=sys.stderr)
            return 2
    try:
        lines = read_lines(path)
    except (OSError, UnicodeDecodeError) as e:
        print(f"cannot read export: {e}", file=sys.stderr)
        return 2
    lines, checkpoints = split_checkpoints(lines)
    used = "no checkpoint" if checkpoint is None else f"checkpoint seq={checkpoint[0]} given"
    if checkpoints and public_key is None:
        print("warning: checkpoint lines not checked: pass --public-key", file=sys.stderr)
    elif public_key is not None:
        try:
            newest, every = newest_checkpoint(checkpoints, workspace or first_workspace(lines),
                                              public_key)
        except BadCheckpoint as e:
            print(e)
            return 1
        if newest is None:
            print("warning: no signed checkpoint: deleting the newest events would not show",
                  file=sys.stderr)
        elif checkpoint is None:
            checkpoint = every
            used = f"checkpoint seq={newest[0]} at={newest[2]}"
    # With --public-key, the line says which checkpoint was used.
    suffix = f" ({used})" if public_key is not None else ""
    try:
        count, head = verify(lines, workspace, checkpoint)
    except Bad as e:
        print(f"{e}{suffix}")
        return 1
    print(f"ok {count} events head={head.hex()}{suffix}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
