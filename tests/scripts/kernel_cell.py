"""Runs in the workstation: one cell on a new kernel over Jupyter's websocket (see KERNEL_CELL)."""

import datetime
import json
import re
import sys
import uuid
from pathlib import Path

from tornado import httpclient, ioloop, websocket

code, wait = sys.argv[1], sys.argv[2]
token = sys.argv[3] if len(sys.argv) > 3 else re.search(r"token=(\w+)", Path("/run/rig/urls").read_text())[1]


async def main():
    http = httpclient.AsyncHTTPClient()
    r = await http.fetch(
        "http://127.0.0.1:8888/api/kernels",
        method="POST",
        body="{}",
        headers={"Authorization": "token " + token},
    )
    kid = json.loads(r.body)["id"]
    ws = await websocket.websocket_connect(f"ws://127.0.0.1:8888/api/kernels/{kid}/channels?token={token}")
    msg_id = uuid.uuid4().hex
    header = {
        "msg_id": msg_id,
        "msg_type": "execute_request",
        "username": "test",
        "version": "5.3",
        "session": uuid.uuid4().hex,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),  # noqa: UP017 (any Python 3)
    }
    content = {
        "code": code,
        "silent": False,
        "store_history": False,
        "user_expressions": {},
        "allow_stdin": False,
        "stop_on_error": True,
    }
    ws.write_message(
        json.dumps(
            {
                "header": header,
                "parent_header": {},
                "metadata": {},
                "content": content,
                "channel": "shell",
                "buffers": [],
            }
        )
    )
    out = ""
    while True:
        msg = await ws.read_message()
        if msg is None:
            print("CLOSED")
            return
        m = json.loads(msg)
        if m.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        if m["msg_type"] == "stream":
            out += m["content"]["text"]
        if m["msg_type"] == "error":
            print("ERROR", m["content"]["ename"], m["content"]["evalue"])
        if wait == "start" and m["msg_type"] == "status" and m["content"]["execution_state"] == "busy":
            print("STARTED", kid)
            return
        if m["msg_type"] == "execute_reply":
            print("OUTPUT:" + out)
            print("REPLY", m["content"]["status"], kid)
            return


ioloop.IOLoop.current().run_sync(main, timeout=60)
