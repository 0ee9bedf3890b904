from harnessopt.cli import main

raise SystemExit(main())
