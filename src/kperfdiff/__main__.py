from kperfdiff.commands import main

raise SystemExit(main())
