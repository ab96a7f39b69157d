from rig.cli import main

raise SystemExit(main())
