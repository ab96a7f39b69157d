"""One module per `rig` sub-command, named like it: each parses its arguments, calls the machinery
in the packages beside (workstation, launch, yolo, observe), prints, and returns an exit code."""
