"""`python -I -m rig.workstation.boardserver ARGS`: TensorBoard on the socket the supervisor holds.

`tensorboard ARGS` binds its own port (and refuses to start when something answers there); here it
serves on the listening socket `rig serve` hands it (rig.workstation.handover), so no other process
can take TensorBoard's port while it restarts, and says on its ready pipe when it serves. Like
JupyterLab's server it makes itself non-dumpable first: the sessions of user yolo (the same uid) can
neither ptrace it nor take its socket (pidfd_getfd). Started isolated (`-I`), it imports nothing from
~/.local or PYTHONPATH. ARGS are TensorBoard's own.
"""

from __future__ import annotations

import sys
from typing import Any

from rig import program
from rig.errors import RigError
from rig.workstation.labserver import not_dumpable, take_socket


@program.entry("tensorboard")
def main() -> int:
    not_dumpable()
    taken = take_socket()
    from absl import app  # type: ignore[import-not-found,unused-ignore]
    from tensorboard import default, main_lib, program  # type: ignore[import-not-found,unused-ignore]
    from tensorboard.plugins import base_plugin  # type: ignore[import-not-found,unused-ignore]
    from werkzeug import serving  # type: ignore[import-not-found,unused-ignore]

    base: Any = program.WerkzeugServer

    class HeldSocketServer(base):  # type: ignore[misc,unused-ignore]
        """TensorBoard's own server, minus its bind: werkzeug serves an existing descriptor."""

        def __init__(self, wsgi_app: Any, flags: Any) -> None:
            self._flags = flags
            self._auto_wildcard = False
            self._host = flags.host
            self._url = None
            self._fix_werkzeug_logging()
            serving.ThreadedWSGIServer.__init__(
                self,
                flags.host,
                flags.port,
                wsgi_app,
                program._WSGIRequestHandler,
                fd=taken.listener.fileno(),
            )
            self.server_port = flags.port  # what http.server's bind would have set, for its URL

        def print_serving_message(self) -> None:  # TensorBoard calls it just before serve_forever
            super().print_serving_message()
            taken.ready()

    # tensorboard.main.run_main, with our server.
    main_lib.global_init()
    board = program.TensorBoard(plugins=default.get_plugins(), server_class=HeldSocketServer)
    try:
        app.run(board.main, flags_parser=board.configure)
    except base_plugin.FlagsError as e:
        raise RigError(str(e)) from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
