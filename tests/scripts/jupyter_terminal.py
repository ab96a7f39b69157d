"""Runs in the workstation: types a line into a new Jupyter terminal (see TERMINAL)."""

import json
import re
import sys
from pathlib import Path

from tornado import httpclient, ioloop, websocket

typed = sys.argv[1]
until = sys.argv[2] if len(sys.argv) > 2 else ""
token = sys.argv[3] if len(sys.argv) > 3 else re.search(r"token=(\w+)", Path("/run/rig/urls").read_text())[1]


async def main():
    http = httpclient.AsyncHTTPClient()
    r = await http.fetch(
        "http://127.0.0.1:8888/api/terminals",
        method="POST",
        body="{}",
        headers={"Authorization": "token " + token},
    )
    name = json.loads(r.body)["name"]
    ws = await websocket.websocket_connect(f"ws://127.0.0.1:8888/terminals/websocket/{name}?token={token}")
    ws.write_message(json.dumps(["stdin", typed + "\r"]))
    if not until:
        await ws.read_message()
        ws.close()
        print("TYPED", name)
        return
    out = ""
    while not re.search(until, out):
        msg = await ws.read_message()
        if msg is None:
            break
        kind, *data = json.loads(msg)
        if kind == "stdout":
            out += data[0]
    print(out)


ioloop.IOLoop.current().run_sync(main, timeout=30)
