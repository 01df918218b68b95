"""A stdio MCP server that probes where it runs, for the sandbox tests: newline-delimited
JSON-RPC by hand with the standard library only, so any python (the sandbox's toolchain one)
runs it. A tool that fails answers ``isError`` with the exception, as a real server would."""
import json
import os
import socket
import subprocess
import sys

ARGS = {"type": "object", "properties": {"path": {"type": "string"},
                                         "text": {"type": "string"},
                                         "port": {"type": "integer"},
                                         "mark": {"type": "string"}}}
TOOLS = [{"name": name, "description": f"The {name} probe.", "inputSchema": ARGS}
         for name in ("read", "write", "connect", "where", "spawn")]


def read(args):
    with open(args["path"], encoding="utf-8") as handle:
        return handle.read()


def write(args):
    with open(args["path"], "w", encoding="utf-8") as handle:
        handle.write(args.get("text", ""))
    return "written"


def connect(args):
    socket.create_connection(("127.0.0.1", int(args["port"])), timeout=2).close()
    return "connected"


def where(args):
    return json.dumps({"cwd": os.getcwd(), "home": os.environ.get("HOME"),
                       "pid": os.getpid(), "env": sorted(os.environ)})


def spawn(args):
    child = subprocess.Popen(["sleep", args["mark"]], start_new_session=True,  # noqa: S603,S607
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    return str(child.pid)


PROBES = {"read": read, "write": write, "connect": connect, "where": where, "spawn": spawn}


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    message = json.loads(line)
    method, id_ = message.get("method"), message.get("id")
    params = message.get("params") or {}
    if id_ is None:
        continue  # a notification
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": id_, "result": {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}}, "serverInfo": {"name": "probe", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": id_, "result": {"tools": TOOLS}})
    elif method == "tools/call":
        try:
            text, failed = PROBES[params["name"]](params.get("arguments") or {}), False
        except Exception as exc:  # noqa: BLE001 - the probe's answer is the failure itself
            text, failed = f"{type(exc).__name__}: {exc}", True
        send({"jsonrpc": "2.0", "id": id_, "result": {
            "content": [{"type": "text", "text": text}], "isError": failed}})
    else:
        send({"jsonrpc": "2.0", "id": id_,
              "error": {"code": -32601, "message": f"no method {method}"}})
