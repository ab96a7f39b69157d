import sys

from rig.workstation.pipgate import main

sys.exit(main())
