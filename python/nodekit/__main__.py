from nodekit.cli import main

raise SystemExit(main())
