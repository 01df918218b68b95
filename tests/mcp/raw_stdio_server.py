"""A raw stdio MCP server for the bound tests: newline-delimited JSON-RPC, written by hand so
the tests choose the exact bytes an answer takes (huge, nested, id first or last)."""
import json
import sys

EXTRA = int(sys.argv[1]) if len(sys.argv) > 1 else 0
OBJECT = {"type": "object", "properties": {"text": {"type": "string"},
                                           "size": {"type": "integer"},
                                           "depth": {"type": "integer"},
                                           "id_last": {"type": "boolean"}}}
TOOLS = [{"name": name, "description": f"The {name} tool.", "inputSchema": OBJECT,
          "annotations": {"readOnlyHint": True}}
         for name in ("echo", "huge", "nested", "shout_notice")]
TOOLS += [{"name": f"tool_{i:03d}", "description": f"Does thing number {i} with great care.",
           "inputSchema": {"type": "object", "properties": {"what": {"type": "string"}}}}
          for i in range(EXTRA)]
out = sys.stdout.buffer


def send(message):
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def text(id_, body):
    send({"jsonrpc": "2.0", "id": id_, "result": {"content": [{"type": "text", "text": body}]}})


def huge(id_, size, id_last):
    head = {"jsonrpc": "2.0"} if id_last else {"jsonrpc": "2.0", "id": id_}
    out.write(json.dumps(head)[:-1].encode() + b', "result": {"content": [{"type": "text", '
              b'"text": "')
    while size > 0:
        out.write(b"x" * min(size, 1 << 20))
        size -= 1 << 20
    out.write(b'"}]}' + (f', "id": {json.dumps(id_)}}}'.encode() if id_last else b"}") + b"\n")
    out.flush()


for line in sys.stdin:
    message = json.loads(line)
    method, id_ = message.get("method"), message.get("id")
    params = message.get("params") or {}
    if id_ is None:
        continue  # a notification
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": id_, "result": {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}}, "serverInfo": {"name": "raw", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": id_, "result": {"tools": TOOLS}})
    elif method == "tools/call":
        name, args = params["name"], params.get("arguments") or {}
        if name == "echo":
            text(id_, args.get("text", ""))
        elif name == "huge":
            huge(id_, int(args["size"]), bool(args.get("id_last")))
        elif name == "nested":
            depth = int(args["depth"])
            out.write(json.dumps({"jsonrpc": "2.0", "id": id_})[:-1].encode()
                      + b', "result": {"content": [], "structuredContent": '
                      + b'{"a": ' * depth + b"1" + b"}" * depth + b"}}\n")
            out.flush()
        elif name == "shout_notice":  # a huge notification first, then the answer
            size = int(args["size"])
            out.write(b'{"jsonrpc": "2.0", "method": "notifications/message", "params": '
                      b'{"level": "info", "data": "' + b"y" * size + b'"}}\n')
            text(id_, "after the notice")
        else:
            send({"jsonrpc": "2.0", "id": id_, "error": {"code": -32601, "message": name}})
    else:
        send({"jsonrpc": "2.0", "id": id_, "error": {"code": -32601, "message": method}})
