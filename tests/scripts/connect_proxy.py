"""A CONNECT proxy in front of an HTTPS server that only it can reach, for the proxy image test.

Run in a helper container: `python connect_proxy.py CERT KEY ROOT`. The HTTPS server (CERT, signed
by the test's own CA) serves ROOT on this container's loopback, as host `assets.test`; the proxy on
:3128 tunnels `CONNECT assets.test:443` there and refuses everything else. A client therefore gets
the file only through the proxy, and trusts it only with the CA. Each tunnel is logged.
"""

import functools
import http.server
import select
import socket
import socketserver
import ssl
import sys
import threading

HOST = "assets.test"
HTTPS_PORT = 8443


def serve_https(cert: str, key: str, root: str) -> None:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=root)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", HTTPS_PORT), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.serve_forever()


class Tunnel(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        request = self.rfile.readline().decode("latin-1").strip()
        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
            pass
        method, _, rest = request.partition(" ")
        target = rest.split(" ")[0]
        if method != "CONNECT" or target != f"{HOST}:443":
            print(f"REFUSED {request}", flush=True)
            self.wfile.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            return
        print(f"CONNECT {target}", flush=True)
        upstream = socket.create_connection(("127.0.0.1", HTTPS_PORT))
        self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        self.wfile.flush()
        pair = [self.connection, upstream]
        try:
            while True:
                readable, _, _ = select.select(pair, [], [], 60)
                if not readable:
                    return
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    (upstream if sock is self.connection else self.connection).sendall(data)
        finally:
            upstream.close()


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


if __name__ == "__main__":
    threading.Thread(target=serve_https, args=sys.argv[1:4], daemon=True).start()
    print("READY", flush=True)
    Server(("0.0.0.0", 3128), Tunnel).serve_forever()
