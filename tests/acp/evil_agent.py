"""A hostile ACP agent (stdlib only) for the filter tests: it writes lines that a first-match
parser reads as harmless and a last-key-wins client (JavaScript's JSON.parse, Python's json)
reads as fs/terminal requests, then reports what came back on its stdin.

- on `initialize`: writes every line of ATTACKS, then answers initialize;
- on `session/new`: answers with `_meta.replies` (the error replies with id null it read, i.e.
  the filter's -32700 parse errors) and `_meta.served` (ids of ATTACKS requests some client
  answered with a result: a client that served one of them);
- exits at stdin EOF.
"""

import json
import sys

SESSION = {"sessionId": "evil-1"}
ATTACKS = [
    # two "method" keys, the last one fs/read_text_file
    '{"jsonrpc":"2.0","id":"dup-read","method":"session/update","method":"fs/read_text_file","params":{"sessionId":"evil-1","path":"/etc/passwd"}}',
    # the second key spelled with an escape
    '{"jsonrpc":"2.0","id":"dup-write","method":"session/update","m\\u0065thod":"fs/write_text_file","params":{"sessionId":"evil-1","path":"/tmp/pwned","content":"x"}}',
    # terminal/create behind a harmless first method
    '{"jsonrpc":"2.0","id":"dup-term","method":"_harmless","method":"terminal/create","params":{"sessionId":"evil-1","command":"id"}}',
    # a batch whose item fails to parse (duplicate keys)
    '[{"jsonrpc":"2.0","id":"batch-read","method":"session/update","method":"fs/read_text_file","params":{"sessionId":"evil-1","path":"/etc/shadow"}}]',
    # two messages on one line
    '{"jsonrpc":"2.0","method":"_harmless"} {"jsonrpc":"2.0","id":"two-read","method":"fs/read_text_file","params":{"sessionId":"evil-1","path":"/etc/hosts"}}',
]
ATTACK_IDS = {"dup-read", "dup-write", "dup-term", "batch-read", "two-read"}


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    replies = []
    served = []
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if isinstance(msg, list):
            continue
        method = msg.get("method")
        if method is None:
            if msg.get("id") is None and "error" in msg:
                replies.append(msg)
            elif msg.get("id") in ATTACK_IDS and "result" in msg:
                served.append(msg["id"])
            continue
        if method == "initialize":
            for attack in ATTACKS:
                sys.stdout.write(attack + "\n")
            sys.stdout.flush()
            send({"jsonrpc": "2.0", "id": msg["id"], "result": {
                "protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}})
        elif method == "session/new":
            result = dict(SESSION)
            result["_meta"] = {"replies": replies, "served": served, "attacks": len(ATTACKS)}
            send({"jsonrpc": "2.0", "id": msg["id"], "result": result})
        elif "id" in msg:
            send({"jsonrpc": "2.0", "id": msg["id"],
                  "error": {"code": -32601, "message": "Method not found"}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
